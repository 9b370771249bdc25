"""``hermes-box doctor``: a bounded health check of one box, one row per check with a fix.

Checks, in order: the box's state; isolation (its own PID namespace, host
paths invisible, system directories read-only); ``/data`` (writable from
inside and the same directory the host keeps, and durable: the marker written
inside at the last ``stop`` is found after the start); the tmux session;
registry consistency; the box's lock; links under /data that save would
refuse (read on the host, so a stopped box is checked too); the most recent
backup and its age.

The whole doctor takes at most ``DOCTOR_TIMEOUT`` seconds (box.env, default
5): each in-box check runs one short shell script with its own timeout,
clipped to what is left of that budget, and is killed when it overruns; a
check that cannot run in time says so.  A "fail" row makes the doctor exit 1;
"warn" (no recent backup, links save would refuse, tmux missing, the lock
held by a live command) and "skip" (a stopped box's in-box checks) do not.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from reference.box_lite import locks
from reference.box_lite.backup import LINK_FIX, describe_links, latest_backup, stale_partials, unsaveable_links
from reference.box_lite.errors import BoxError
from reference.box_lite.paths import DATA_INSIDE, HOME_INSIDE, WORKSPACE_INSIDE, BoxHome
from reference.box_lite.records import json_bytes, publish_atomic, read_object, utc_now
from reference.box_lite.settings import Settings

if TYPE_CHECKING:
    from reference.box_lite.boxes import BoxManager

CHECK_TIMEOUT_S = 2.5
PROBE = ".hermes-box-probe"
NO_ANSWER = "did not answer"
MARKER_DIR = f"{DATA_INSIDE}/.hermes-box"
STOP_MARKER = f"{MARKER_DIR}/stop-marker"
STOP_RECORD = "stop-marker.json"  # host side, in the box's directory: what the last stop wrote

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class Report:
    box: str
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "box": self.box,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "checks": [{"name": c.name, "status": c.status, "detail": c.detail, "fix": c.fix} for c in self.checks],
        }


# --- running short scripts in the box ------------------------------------------------------------


class Budget:
    def __init__(self, total: float) -> None:
        self.deadline = time.monotonic() + total

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def timeout(self, own: float) -> float:
        return max(0.0, min(own, self.left()))


def run_in_box(manager: BoxManager, name: str, script: str, timeout: float) -> tuple[int | None, str]:
    """(exit code or None on timeout, stdout+stderr) of ``sh -c script`` in the box, within ``timeout``.

    The whole call is bounded, starting the command included (a daemon that does not answer would
    otherwise hold the caller for the control socket's own timeout): it runs on a worker thread,
    and a command still running at the deadline is killed.  Errors starting it are raised here.
    """
    if timeout <= 0:
        return None, ""
    deadline = time.monotonic() + timeout
    result: dict[str, Any] = {}
    started: list[Any] = []
    # Closed below once the worker is done; a worker that outlives the deadline keeps them open.
    out = tempfile.TemporaryFile()  # noqa: SIM115
    null = open(os.devnull, "rb")  # noqa: SIM115

    def work() -> None:
        try:
            command = manager.popen(
                name, ["sh", "-c", script], stdin=null.fileno(), stdout=out.fileno(), stderr=out.fileno()
            )
            started.append(command)
            result["code"] = command.wait(timeout=max(0.01, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        except BaseException as exc:
            result["error"] = exc

    worker = threading.Thread(target=work, name=f"doctor-{name}", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()) + 0.2)
    if "error" in result:
        out.close()
        null.close()
        raise result["error"]
    if "code" not in result:
        for command in started:
            with contextlib.suppress(Exception):
                command.kill()
            with contextlib.suppress(Exception):
                command.wait(timeout=1)
        if not worker.is_alive():
            out.close()
            null.close()
        return None, ""
    try:
        out.seek(0)
        return result["code"], out.read(64 * 1024).decode("utf-8", "replace")
    finally:
        out.close()
        null.close()


def write_stop_marker(manager: BoxManager, home: BoxHome, name: str, timeout: float = 3.0) -> bool:
    """Before a stop (and at repair): write a fresh marker into the box's /data from inside, and record
    it on the host.

    The doctor's durability check looks for this marker after the next start.  Best effort: a box that
    does not answer in ``timeout`` gets no marker (the record is removed so no stale one is compared).
    """
    record = home.box(name).root / STOP_RECORD
    nonce = secrets.token_hex(8)
    script = f"mkdir -p {MARKER_DIR} && printf %s {nonce} > {STOP_MARKER}.tmp && mv {STOP_MARKER}.tmp {STOP_MARKER}"
    try:
        code, _ = run_in_box(manager, name, script, timeout)
    except (BoxError, OSError):
        code = None
    if code != 0:
        with contextlib.suppress(OSError):
            record.unlink()
        return False
    publish_atomic(record, json_bytes({"nonce": nonce, "written_at": utc_now()}))
    return True


# --- the checks ----------------------------------------------------------------------------------


def _unanswered(check: str, fix: str) -> Check:
    """The row of an in-box check whose probe got no answer in time (the in-box checks after it are skipped)."""
    return Check(check, FAIL, f"the box {NO_ANSWER} within {CHECK_TIMEOUT_S:g} s", fix)


def _host_ns(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return ""


def _isolation(manager: BoxManager, home: BoxHome, name: str, budget: Budget, *, answered: bool = True) -> Check:
    """The box sees none of the host's private paths and processes, and cannot write the system dirs;
    ``answered``: False when its daemon already failed to answer the doctor's first question."""
    fix = f"stop and start the box (`hermes-box stop {name}; hermes-box start {name}`), then `hermes-box repair {name}`"
    if not answered:
        return _unanswered("isolation", fix)
    sentinel = home.run(name).root / f".doctor-{secrets.token_hex(6)}"
    candidates = {str(sentinel), str(home.config_dir), str(home.boxes_dir), str(Path.home())}
    inside: tuple[str, ...] = ("/", DATA_INSIDE, "/home", HOME_INSIDE, "/tmp")
    if "machine" in (manager.box_json(name) or {}):  # its root's home is the box's own (machine.py)
        inside += ("/root",)
    hidden = sorted(
        p for p in candidates if p not in inside and not any(p == d or p.startswith(d + "/") for d in ("/usr", "/etc"))
    )
    system = [d for d in ("/usr", "/etc", "/bin", "/lib") if os.path.isdir(d) and not os.path.islink(d)]
    script = "; ".join(
        [
            'echo "pidns=$(readlink /proc/self/ns/pid)"',
            "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n",
            *(f"[ -e '{p}' ] && echo visible='{p}'" for p in hidden),
            *(f"if touch '{d}/{PROBE}' 2>/dev/null; then rm -f '{d}/{PROBE}'; echo writable='{d}'; fi" for d in system),
            "echo done",
        ]
    )
    try:
        sentinel.write_text("host only\n")
        code, out = run_in_box(manager, name, script, budget.timeout(CHECK_TIMEOUT_S))
    finally:
        with contextlib.suppress(OSError):
            sentinel.unlink()
    if code is None:
        return _unanswered("isolation", fix)
    values = dict(
        line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith(("visible", "writable"))
    )
    problems: list[str] = []
    if code != 0 or "done" not in out.split():
        problems.append(f"the probe failed (exit {code}): {out.strip()[:200]}")
    host_pidns = _host_ns("pid")
    if not values.get("pidns") or values.get("pidns") == host_pidns:
        problems.append("the box shares the host's PID namespace")
    visible = [line.split("=", 1)[1] for line in out.splitlines() if line.startswith("visible=")]
    writable = [line.split("=", 1)[1] for line in out.splitlines() if line.startswith("writable=")]
    if visible:
        problems.append(f"host paths visible inside: {', '.join(visible)}")
    if writable:
        problems.append(f"system directories writable: {', '.join(writable)}")
    if problems:
        return Check("isolation", FAIL, "; ".join(problems), fix)
    procs = values.get("procs", "?")
    return Check(
        "isolation",
        OK,
        f"own PID namespace ({procs} processes visible), {len(hidden)} host paths invisible, "
        f"{', '.join(system)} read-only",
    )


def _data_fix(name: str) -> str:
    return f"run `hermes-box repair {name}` (keeps /data); if /data is lost, restore it: `hermes-box load ARCHIVE NEW`"


def _data(manager: BoxManager, home: BoxHome, name: str, budget: Budget) -> Check:
    nonce = secrets.token_hex(8)
    probe = f"{MARKER_DIR}/doctor-probe-{nonce}"
    script = (
        f"mkdir -p {MARKER_DIR} && printf %s {nonce} > {probe} && "
        f"test -d {WORKSPACE_INSIDE} -a -w {WORKSPACE_INSIDE} && echo workspace=ok; "
        f"echo marker=$(cat {STOP_MARKER} 2>/dev/null)"
    )
    code, out = run_in_box(manager, name, script, budget.timeout(CHECK_TIMEOUT_S))
    host_probe = manager.data_dir(name) / probe.removeprefix(DATA_INSIDE + "/")
    try:
        seen = host_probe.read_text() if host_probe.exists() else None
    finally:
        with contextlib.suppress(OSError):
            host_probe.unlink()
    fix = _data_fix(name)
    if code is None:
        return _unanswered("/data", fix)
    if code != 0 or seen != nonce:
        why = "not writable from inside" if code != 0 else f"a file written at /data is not in {manager.data_dir(name)}"
        return Check("/data", FAIL, why, fix)
    lines = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if lines.get("workspace") != "ok":
        return Check("/data", FAIL, f"~/workspace ({WORKSPACE_INSIDE}) is missing or not writable", fix)
    record = read_object(home.box(name).root / STOP_RECORD)
    if record is None or "nonce" not in record:
        return Check("/data", OK, "writable from inside and kept on the host; no stop recorded yet to prove durability")
    if lines.get("marker") != record["nonce"]:
        return Check(
            "/data",
            FAIL,
            f"the marker written at the last stop ({record.get('written_at', '?')}) is not in /data after the start",
            fix,
        )
    return Check(
        "/data", OK, f"writable, and durable: the marker written at stop ({record.get('written_at')}) was found"
    )


def _data_on_host(manager: BoxManager, home: BoxHome, name: str) -> Check:
    """/data of a stopped box, seen from the host: the box's home and ~/workspace are directories of
    the box's own (owned by the ids its root maps to, not links), and the last stop's marker is there."""
    data, box_home = manager.data_dir(name), home.box(name).home
    uid, gid = manager.data_owner("machine" in (manager.box_json(name) or {}))
    fix = _data_fix(name)
    for path, shown in ((data, DATA_INSIDE), (box_home, HOME_INSIDE), (box_home / "workspace", WORKSPACE_INSIDE)):
        try:
            st = path.lstat()
        except FileNotFoundError:
            return Check("/data", FAIL, f"{shown} is missing ({path})", fix)
        if not stat.S_ISDIR(st.st_mode):
            return Check("/data", FAIL, f"{shown} is not a directory ({path})", fix)
        if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (uid, gid):
            return Check("/data", FAIL, f"{shown} belongs to {st.st_uid}:{st.st_gid}, not the box's {uid}:{gid}", fix)
        if not st.st_mode & stat.S_IWUSR:
            return Check("/data", FAIL, f"{shown} is not writable by the box (mode {stat.S_IMODE(st.st_mode):o})", fix)
    record = read_object(home.box(name).root / STOP_RECORD)
    if record is not None and "nonce" in record:
        marker = data / STOP_MARKER.removeprefix(DATA_INSIDE + "/")
        try:
            found = marker.read_text().strip()
        except OSError:
            found = None
        if found != record["nonce"]:
            return Check("/data", FAIL, f"the marker written at the last stop is not in {data}", fix)
    return Check(
        "/data", OK, "seen from the host while stopped: its directories are the box's, the stop marker is there"
    )


def _limits(limits: dict[str, Any]) -> Check:
    """The running box's resource limits as its daemon applied them (cgroups), or why it could not."""
    enforced, refused = limits.get("enforced") or {}, limits.get("refused") or {}
    if refused:
        why = "; ".join(f"{shown} is not enforced: {reason}" for shown, reason in refused.items())
        return Check("limits", WARN, why, "run hermes-box as root, or where those cgroup controllers are delegated")
    if enforced:
        return Check("limits", OK, ", ".join(f"{shown} (cgroup {path})" for shown, path in enforced.items()))
    return Check("limits", OK, "none set (PIDS_MAX, MEMORY_MAX and CPU_MAX in box.env, or new --pids-max ...)")


# --- the workload and its MCP endpoint ------------------------------------------------------------


def _workload_rows(manager: BoxManager, home: BoxHome, name: str, pong: dict[str, Any], budget: Budget) -> list[Check]:
    """The supervised workload's state, then its MCP handshake in the box and through the forwarded
    host port (``mcp_probe``); nothing for a box without a workload."""
    from reference.box_lite import control, endpoint, mcp_probe

    record = pong.get("workload")
    if not isinstance(record, dict):
        return []
    box = home.box(name)
    try:
        own = Settings.load(box.env_file)  # the box's copy: what its daemon runs with
    except BoxError:
        own = Settings()
    state = str(record.get("state"))
    logs = f"hermes-box exec {name} -- hb logs"
    rows: list[Check] = []
    if state == "running":
        rows.append(Check("workload", OK, f"running (port {record.get('port')}, restarts {record.get('restarts')})"))
    elif state == "paused":
        up = f"hermes-box exec {name} -- hb up"
        rows.append(Check("workload", FAIL, "paused (hb down): its supervisor keeps it stopped until hb up", up))
    else:
        exit_note = f", last exit {record.get('last_exit')}" if record.get("last_exit") is not None else ""
        rows.append(Check("workload", FAIL, f"{state} (restarts {record.get('restarts')}{exit_note})", logs))
    path = own.workload_mcp_path
    if path is None:
        return rows
    token = endpoint.read_token(box) or ""
    paused = "paused (hb down): no MCP answer until hb up"

    def probe(label: str, connect: mcp_probe.Connect, where: str, authority: str) -> Check:
        if state == "paused":
            return Check(label, FAIL, paused, f"hermes-box exec {name} -- hb up")
        seconds = budget.timeout(CHECK_TIMEOUT_S)
        if seconds <= 0.05:
            return Check(label, FAIL, "not run: the doctor's time budget ran out", "raise DOCTOR_TIMEOUT in box.env")
        outcome = mcp_probe.handshake(connect, path=path, token=token, timeout=seconds, host=authority)
        fix = f"see {logs}; then hermes-box repair {name}"
        return Check(label, OK if outcome.ok else FAIL, f"{where}: {outcome.detail}", "" if outcome.ok else fix)

    sock = home.run(name).control_socket
    port = own.workload_port
    rows.append(
        probe(
            "MCP in box",
            lambda t: control.connect_inside(sock, port, name=name, timeout=t),
            f"127.0.0.1:{port}{path} in the box",
            f"127.0.0.1:{port}",
        )
    )
    forwarded = pong.get("endpoint")
    if not isinstance(forwarded, dict):
        rows.append(Check("MCP host", SKIP, "skipped: no forwarded port (EXPOSE_EXECUTOR_WEB=off)", ""))
    elif not forwarded.get("listening"):
        rows.append(Check("MCP host", FAIL, str(forwarded.get("error")), f"free the port, then restart {name}"))
    else:
        host_port = int(forwarded["host_port"])
        where = f"127.0.0.1:{host_port}"
        rows.append(probe("MCP host", mcp_probe.tcp(host_port), f"{where}{path} on the host", where))
    return rows


def _tmux(manager: BoxManager, name: str, settings: Settings, budget: Budget) -> Check:
    script = (
        "command -v tmux >/dev/null || { echo missing; exit 0; }; "
        f"tmux has-session -t '={name}' 2>/dev/null && echo session || echo none"
    )
    code, out = run_in_box(manager, name, script, budget.timeout(CHECK_TIMEOUT_S))
    if code is None:
        return _unanswered(
            "tmux session", f"stop and start the box (`hermes-box stop {name}; hermes-box start {name}`)"
        )
    words = out.split()
    if "missing" in words:
        return Check(
            "tmux session",
            WARN,
            "tmux is not installed: enter opens a plain login shell",
            "install tmux (apt-get install tmux)",
        )
    if not settings.tmux:
        return Check("tmux session", OK, "TMUX=off in box.env: enter opens a plain login shell")
    if "session" in words:
        return Check("tmux session", OK, f"session {name} is running (enter attaches it)")
    return Check("tmux session", OK, f"no session yet (`hermes-box enter {name}` starts {name})")


def _registry(manager: BoxManager, name: str) -> Check:
    try:
        problems = manager.disagreements(name)
    except BoxError as exc:
        return Check("registry", FAIL, exc.what + (f": {exc.why}" if exc.why else ""), exc.fix)
    if problems:
        return Check("registry", FAIL, "; ".join(problems), f"run `hermes-box repair {name}`")
    return Check("registry", OK, "registered, directory and box.json agree")


def _lock(home: BoxHome, name: str) -> Check:
    kind, holder = locks.lock_state(home, name)
    text = locks.describe((kind, holder))
    if kind == "held" and holder is not None and holder.pid != os.getpid():
        return Check("lock", WARN, text, "wait for that command to finish (the lock frees itself when it exits)")
    return Check("lock", OK, text)


def _links(manager: BoxManager, name: str, budget: Budget) -> Check:
    """The links under /data that save would refuse, found on the host side before a save fails."""
    seconds = budget.timeout(CHECK_TIMEOUT_S)
    scan = unsaveable_links(manager.data_dir(name), seconds=seconds)
    if scan.links:
        many = len(scan.links) > 1
        more = "" if scan.complete else " (at least: not all of /data was seen in time)"
        what = f"{len(scan.links)} symbolic link{'s' if many else ''} under {DATA_INSIDE}{more}"
        are = "are absolute or lead" if many else "is absolute or leads"
        return Check(
            "/data links",
            WARN,
            f"{what} {are} out of it: save will refuse {'them' if many else 'it'} ({describe_links(scan.links)})",
            LINK_FIX,
        )
    if not scan.complete:
        return Check(
            "/data links", OK, f"no link save would refuse among the {scan.entries} entries seen in {seconds:.1f} s"
        )
    return Check("/data links", OK, f"every symbolic link under {DATA_INSIDE} stays inside it (save keeps them)")


def _backup(home: BoxHome, name: str, settings: Settings) -> Check:
    latest = latest_backup(home, name)
    fix = f"run `hermes-box save {name}`"
    partials = stale_partials(home, name) if locks.lock_state(home, name)[0] != "held" else []
    if partials:  # no save holds the box's lock: these are a killed save's
        them = "them" if len(partials) > 1 else "it"
        return Check(
            "backup",
            WARN,
            f"{len(partials)} partial archive(s) of an interrupted save in {home.backups_dir} "
            f"({', '.join(p.name for p in partials[:3])})",
            f"the next `hermes-box save {name}` removes {them} (or delete {them})",
        )
    if latest is None:
        return Check("backup", WARN, f"no backup in {home.backups_dir}", fix)
    age = latest.age_seconds
    detail = f"{latest.path.name} ({latest.age_text} old)"
    if age > settings.backup_max_age_days * 86400:
        return Check("backup", WARN, f"{detail}, older than {settings.backup_max_age_days:g} days", fix)
    return Check("backup", OK, detail)


def run_doctor(manager: BoxManager, home: BoxHome, settings: Settings, name: str) -> Report:
    """Every check of box ``name`` within ``settings.doctor_timeout`` seconds."""
    started = time.monotonic()
    budget = Budget(settings.doctor_timeout)
    report = Report(name)
    state = manager.state(name)
    frozen: bool | None = False  # None: the daemon did not answer (the isolation check says so)
    pong: dict[str, Any] = {}
    if state == "running":
        try:
            pong = manager.ping(name, timeout=budget.timeout(CHECK_TIMEOUT_S))
            frozen = bool(pong.get("frozen"))
        except BoxError:
            frozen = None
    if frozen:
        report.checks.append(
            Check(
                "state",
                WARN,
                "frozen: a save is reading /data, the box's processes are stopped until it ends",
                "wait for the save to end (the box thaws when its saver ends, or dies); see `hermes-box ls`",
            )
        )
        report.checks.append(Check("in-box checks", SKIP, "isolation, /data and tmux wait for the thaw", ""))
    elif state == "running":
        report.checks.append(Check("state", OK, "running"))
        in_box: tuple[tuple[str, Callable[[], Check]], ...] = (
            ("isolation", lambda: _isolation(manager, home, name, budget, answered=frozen is not None)),
            ("/data", lambda: _data(manager, home, name, budget)),
            ("tmux session", lambda: _tmux(manager, name, settings, budget)),
        )
        for index, (label, run) in enumerate(in_box):
            if budget.left() <= 0.05:
                report.checks.append(
                    Check(label, FAIL, "not run: the doctor's time budget ran out", "raise DOCTOR_TIMEOUT in box.env")
                )
                continue
            try:
                check = run()
            except (BoxError, OSError) as exc:
                what = getattr(exc, "what", None) or str(exc)
                check = Check(label, FAIL, what, getattr(exc, "fix", "") or f"run `hermes-box repair {name}`")
            report.checks.append(check)
            if check.status == FAIL and NO_ANSWER in check.detail:  # the box does not answer: stop asking
                for later, _ in in_box[index + 1 :]:
                    report.checks.append(Check(later, SKIP, "not run: the box did not answer", check.fix))
                break
    elif state == "stopped":
        report.checks.append(Check("state", OK, "stopped"))
        report.checks.append(_data_on_host(manager, home, name))
        report.checks.append(
            Check("in-box checks", SKIP, "isolation and tmux need a running box", f"hermes-box start {name}")
        )
    elif state == "incomplete":
        try:
            manager.refuse_incomplete(name, "is incomplete")
        except BoxError as exc:  # its why and fix are the ones start and repair give
            report.checks.append(Check("state", FAIL, f"incomplete: {exc.why}", exc.fix))
    elif not manager.disagreements(name):  # whole, but no daemon and no clean stop: the daemon died
        report.checks.append(
            Check(
                "state",
                FAIL,
                "broken: its daemon is gone and the box was not stopped cleanly (every process of it ended)",
                f"hermes-box start {name} (keeps /data)",
            )
        )
    else:
        report.checks.append(Check("state", FAIL, state or "unknown", f"run `hermes-box repair {name}`"))
    if pong:
        report.checks.append(_limits(pong.get("limits") or {}))
        if state == "running" and not frozen:
            report.checks.extend(_workload_rows(manager, home, name, pong, budget))
    report.checks.append(_registry(manager, name))
    report.checks.append(_lock(home, name))
    if manager.data_dir(name).is_dir():
        report.checks.append(_links(manager, name, budget))
    report.checks.append(_backup(home, name, settings))
    report.seconds = time.monotonic() - started
    return report


def print_report(report: Report, stream: IO[str]) -> None:
    width = max(len(c.name) for c in report.checks)
    for c in report.checks:
        stream.write(f"{c.status.upper():4}  {c.name.ljust(width)}  {c.detail}\n")
        if c.fix and c.status != OK:
            stream.write(f"{'':4}  {'':{width}}  fix: {c.fix}\n")
    verdict = "healthy" if report.ok else "NOT healthy"
    stream.write(f"{report.box}: {verdict} ({report.seconds:.1f} s)\n")
    stream.flush()

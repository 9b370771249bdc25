"""``hermes-box``: create, enter, run, stop, save, load and remove Box Lite boxes.

Every command resolves one home (``--home`` > ``HERMES_BOX_HOME`` > XDG) and
reads ``box.env`` there.  Failures print ``error: what — fix`` on stderr (the
reason on a second line) and exit 2 for bad input, 1 for an operation that
failed or a doctor that found a failing check, 130 on Ctrl-C, 143 on SIGTERM
and 129 on SIGHUP (after the interrupted operation has cleaned up what it
made).  ``--debug`` adds tracebacks and the box manager's log.  Passphrases are
read by the archive code (``BOX_PASSPHRASE`` or a prompt without echo) and never
printed.  Progress bars appear only when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

from reference.box_lite.errors import BadInput, BoxError, BoxInterrupted
from reference.box_lite.interrupts import WATCHED, raise_interrupted
from reference.box_lite.paths import HOME_INSIDE, WORKSPACE_INSIDE, BoxHome, check_name
from reference.box_lite.settings import KEYS, Invalid, Settings, default_file_text

if TYPE_CHECKING:
    from reference.box_lite.boxes import BoxInfo, BoxManager

PROG = "hermes-box"


class Context:
    """What every command needs: the home, its settings and (made on first use) the box manager."""

    def __init__(self, home: BoxHome, debug: bool) -> None:
        self.home = home
        self.debug = debug
        self._settings: Settings | None = None
        self._manager: BoxManager | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.load(self.home.settings_file)
        return self._settings

    @property
    def manager(self) -> BoxManager:
        if self._manager is None:
            from reference.box_lite.boxes import BoxManager

            self._manager = BoxManager(self.home, self.settings)
        return self._manager

    def known(self, name: str) -> str:
        """``name`` if a box of that name exists (in any state), else BoxNotFound."""
        return self.manager.require(check_name(name))

    def running(self, name: str) -> str:
        """Start ``name`` if it is stopped; a broken box is an error naming the repair."""
        state = self.manager.state(self.known(name))
        if state == "stopped":
            note(f"starting {name}")
            self.manager.start(name)
        return name


def publish_manifest(home: BoxHome) -> None:
    """Publish the runtime manifest (tool versions, for diagnosis) after a box is made or started."""
    from reference.box_lite.registry import RuntimeManifest

    try:
        RuntimeManifest(home).publish()
    except OSError as exc:
        logging.getLogger(__name__).warning("could not publish the runtime manifest: %s", exc)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- commands ------------------------------------------------------------------------------------


def cmd_new(ctx: Context, args: argparse.Namespace) -> int:
    name = check_name(args.name)
    if not ctx.home.settings_file.exists():
        ctx.home.config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        ctx.home.settings_file.write_text(default_file_text())
    limits = {"pids_max": args.pids_max, "memory_max": args.memory_max, "cpu_max": args.cpu_max}
    info = ctx.manager.create(name, network=args.network, limits=limits)
    publish_manifest(ctx.home)
    net = "on" if info.network else "off (loopback only)"
    note(f"created box {name} (network {net}); its /data is {ctx.manager.data_dir(name)}")
    wire_mcp(ctx, name)
    if args.no_doctor:
        return 0
    return _doctor(ctx, name, as_json=False)


def cmd_ls(ctx: Context, args: argparse.Namespace) -> int:
    boxes = ctx.manager.boxes()

    def state(info: BoxInfo) -> str:  # "frozen": running, its processes stopped while a save reads /data
        if info.state == "running":
            with contextlib.suppress(BoxError):
                return "frozen" if ctx.manager.frozen(info.name, timeout=2.0) else "running"
        return str(info.state)

    if args.json:
        rows = [
            {
                "name": info.name,
                "state": state(info),
                "network": info.network,
                "created_at": info.created_at,
                "last_backup": str(info.last_backup.path) if info.last_backup else None,
                "last_backup_at": info.last_backup.when_text if info.last_backup else None,
                "last_backup_age_s": round(info.last_backup.age_seconds) if info.last_backup else None,
                "endpoint": shown_endpoint(ctx, info.name),
            }
            for info in boxes
        ]
        print(json.dumps({"home": str(ctx.home.root or ctx.home.config_dir), "boxes": rows}, indent=2))
        return 0
    if not boxes:
        note(f"no boxes in {ctx.home.describe()}; create one with `{PROG} new NAME`")
        return 0
    table: list[tuple[str, ...]] = [("NAME", "STATE", "LAST BACKUP", "AGE", "ENDPOINT")]
    for info in boxes:
        backup = info.last_backup
        last, age = (backup.path.name, backup.age_text) if backup else ("never", "-")
        table.append((info.name, state(info), last, age, shown_endpoint(ctx, info.name) or "-"))
    if all(r[4] == "-" for r in table[1:]):  # the ENDPOINT column only when a box has one
        table = [r[:4] for r in table]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return 0


def cmd_start(ctx: Context, args: argparse.Namespace) -> int:
    name = ctx.known(args.name)
    if ctx.manager.state(name) == "running":
        note(f"{name} is already running")
        return 0
    ctx.manager.start(name)
    publish_manifest(ctx.home)
    note(f"started {name}")
    return 0


def cmd_stop(ctx: Context, args: argparse.Namespace) -> int:
    from reference.box_lite.doctor import write_stop_marker

    name = ctx.known(args.name)
    # One hold of the lock (re-entrant in this process) for the marker and the stop: a save reading
    # /data meanwhile makes this fail at once instead of writing into what it archives.
    with ctx.manager.lock(name, "stop"):
        state = ctx.manager.state(name)
        if state == "stopped":
            note(f"{name} is already stopped")
            return 0
        if state == "running":
            write_stop_marker(ctx.manager, ctx.home, name)
        ctx.manager.stop(name)
    note(f"stopped {name}; its /data is kept")
    return 0


def box_home_path(arg: str) -> str:
    """An argument that reached us still reading ``~`` or ``~/...`` was quoted so that the box's home is
    meant, as a remote shell would read it: it names /home/agent, never the caller's home."""
    if arg == "~" or arg.startswith("~/"):
        return HOME_INSIDE + arg[1:]
    return arg


def cmd_exec(ctx: Context, args: argparse.Namespace) -> int:
    argv = list(args.after_dashes if args.after_dashes is not None else args.argv)
    if not argv:
        raise BadInput("exec needs a command", "nothing follows the box name", f"run `{PROG} exec NAME -- CMD ARGS...`")
    argv = [box_home_path(arg) for arg in argv]
    env = _env_pairs(args.env)
    if args.tty and not os.isatty(0):
        raise BadInput("exec --tty needs a terminal", "its standard input is not a terminal", "leave out --tty")
    name = ctx.running(args.name)
    if args.tty:
        from reference.box_lite.control import interact

        command = ctx.manager.popen(name, argv, env=env or None, cwd=args.cwd, tty=True, root=args.root)
        return _exit_status(interact(command))
    with _forward_signals() as forward:
        command = ctx.manager.popen(
            name, argv, env=env or None, cwd=args.cwd, stdin=_fd(0), stdout=_fd(1), stderr=_fd(2), root=args.root
        )
        try:
            forward(command.send_signal)
            code = command.wait()
        finally:
            if command.poll() is None:  # this command is failing: end the box command it started
                with contextlib.suppress(Exception):
                    command.kill()
    return _exit_status(code)


def cmd_enter(ctx: Context, args: argparse.Namespace) -> int:
    from reference.box_lite.control import interact

    if not os.isatty(0):
        raise BadInput(
            "enter needs a terminal",
            "its standard input is not a terminal",
            f"run it from a terminal; scripts use `{PROG} exec NAME -- CMD`",
        )
    name = ctx.running(args.name)
    shell = ctx.settings.shell
    login = f"exec {shlex.quote(shell)} -l"
    if args.no_tmux or not ctx.settings.tmux:
        why = "--no-tmux" if args.no_tmux else "TMUX=off in box.env"
        script = f"echo 'hermes-box: a plain login shell ({why}); no persistent session'; {login}"
    else:
        tmux = shlex.join(["tmux", "new-session", "-A", "-s", name, "-c", WORKSPACE_INSIDE])
        script = (
            f"if command -v tmux >/dev/null 2>&1; then exec {tmux}; fi; "
            "echo 'hermes-box: tmux is not installed in the box: a plain login shell, no persistent session'; "
            f"{login}"
        )
    command = ctx.manager.popen(name, ["sh", "-c", script], env={"SHELL": shell}, cwd=WORKSPACE_INSIDE, tty=True)
    return _exit_status(interact(command))


def cmd_doctor(ctx: Context, args: argparse.Namespace) -> int:
    return _doctor(ctx, ctx.known(args.name), as_json=args.json)


def cmd_repair(ctx: Context, args: argparse.Namespace) -> int:
    from reference.box_lite.doctor import write_stop_marker

    name = ctx.known(args.name)
    with ctx.manager.lock(name, "repair"):
        ctx.manager.refresh_assets(name)
        if ctx.manager.state(name) == "running":
            write_stop_marker(ctx.manager, ctx.home, name)  # /data as it is now is the durability baseline
    publish_manifest(ctx.home)
    wire_mcp(ctx, name)
    note(f"refreshed managed assets and wiring of {name}; /data kept")
    return _doctor(ctx, name, as_json=False)


def cmd_rm(ctx: Context, args: argparse.Namespace) -> int:
    name = ctx.known(args.name)
    backup = ctx.manager.info(name).last_backup
    if backup is not None:
        note(f"most recent backup of {name}: {backup.path} ({backup.age_text} old)")
    else:
        note(f"no backup of {name} found in {ctx.home.backups_dir}: its /data will be lost")
    if not args.force:
        typed = _ask(f"type the box name ({name}) to remove it: ")
        if typed != name:
            raise BadInput(
                "the typed name does not match; nothing was removed",
                f"removing asks for the exact name {name!r}",
                f"type {name} at the prompt, or pass --force in scripts",
            )
    ctx.manager.remove(name)
    publish_manifest(ctx.home)  # its endpoint leaves the manifest
    note(f"removed box {name}")
    return 0


def cmd_save(ctx: Context, args: argparse.Namespace) -> int:
    from reference.box_lite import backup

    name = ctx.known(args.name)
    with _progress(f"saving {name}", ("writing", "verifying")) as progress:
        path = backup.save(ctx.manager, name, out=Path(args.out) if args.out else None, progress=progress)
    print(path)
    note(f"saved {name} to {path} (encrypted and verified)")
    return 0


def cmd_load(ctx: Context, args: argparse.Namespace) -> int:
    from reference.box_lite import backup

    name = check_name(args.name)
    archive = _existing_file(args.archive)
    with _progress(f"loading {archive.name} into {name}", ("validating", "restoring")) as progress:
        backup.load(ctx.manager, archive, name, progress=progress, network=args.network, on_settings=note)
    publish_manifest(ctx.home)
    note(f"loaded {archive} into new box {name}")
    return _doctor(ctx, name, as_json=False)


def cmd_extract(ctx: Context, args: argparse.Namespace) -> int:
    from reference.box_lite import backup

    archive = _existing_file(args.archive)
    with _progress(f"extracting {archive.name}", ("validating", "writing")) as progress:
        target = backup.extract(ctx.home, archive, progress=progress, settings=ctx.settings)
    print(target)
    note(
        f"extracted to {target}: treat it as secret material (it can hold credentials, sessions and private work); "
        "remove it when done"
    )
    return 0


# --- the workload's endpoint: open, ls, MCP wiring ----------------------------------------------

OPEN_TIMEOUT_S = 30.0  # how long `open` waits for the forwarded endpoint to answer
BROWSER_WAIT_S = 30.0  # how long `open` waits for the browser command (a browser that stays is left running)
OPENERS = (("xdg-open",), ("gio", "open"), ("open",))


def shown_endpoint(ctx: Context, name: str) -> str | None:
    """The box's forwarded endpoint without its token (``ls``), None when it has none."""
    from reference.box_lite import endpoint

    port = endpoint.host_port(ctx.manager.box_json(name))
    return endpoint.host_url(port) if port is not None else None


def wire_mcp(ctx: Context, name: str) -> None:
    """With ``WIRE_EXECUTOR_MCP`` and an MCP workload: ``hb wire-mcp`` in the box (new, repair)."""
    settings = ctx.settings
    if not (settings.workload and settings.workload_mcp_path and settings.wire_executor_mcp):
        return
    if ctx.manager.state(name) != "running":
        note(f"{name} is not running: MCP wiring skipped (run `hb wire-mcp` in the box later)")
        return
    import subprocess

    with ctx.manager.popen(name, ["hb", "wire-mcp"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as command:
        out, _ = command.communicate(timeout=30)
    lines = out.decode(errors="replace").strip()
    if command.returncode == 0:
        note(f"wired the workload's MCP endpoint for Claude Code and Codex in {name}")
    else:
        note(f"MCP wiring in {name} failed (exit {command.returncode}): {lines[-300:]}")


def cmd_open(ctx: Context, args: argparse.Namespace) -> int:
    import shutil
    import subprocess
    import time

    import httpx

    from reference.box_lite import endpoint

    name = ctx.running(args.name)
    port = endpoint.host_port(ctx.manager.box_json(name))
    token = endpoint.read_token(ctx.home.box(name))
    served = ctx.manager.ping(name).get("endpoint")
    if port is None or token is None or not isinstance(served, dict):
        raise BadInput(
            f"box {name} has no forwarded endpoint",
            "its settings give it no WORKLOAD, or EXPOSE_EXECUTOR_WEB is off",
            f"set WORKLOAD and EXPOSE_EXECUTOR_WEB=on in {ctx.home.settings_file}, then hermes-box repair {name}",
        )
    if not served.get("listening"):
        raise BoxError(f"box {name}'s endpoint is not listening", str(served.get("error")), f"hermes-box doctor {name}")
    deadline = time.monotonic() + OPEN_TIMEOUT_S
    answer = "nothing"
    with httpx.Client(timeout=5.0) as client:
        while True:
            try:
                status = client.get(endpoint.host_url(port), headers={"Authorization": f"Bearer {token}"}).status_code
            except httpx.HTTPError as exc:
                status, answer = 0, type(exc).__name__
            if status == 503:
                raise BoxError(
                    f"box {name}'s workload is paused", "hb down paused it", f"hermes-box exec {name} -- hb up"
                )
            if status and status != 502:
                break
            answer = f"HTTP {status}" if status else answer
            if time.monotonic() > deadline:
                raise BoxError(
                    f"box {name}'s endpoint did not answer within {OPEN_TIMEOUT_S:g} s",
                    f"the last try got {answer}",
                    f"hermes-box doctor {name}; in the box: hb status, hb logs",
                )
            time.sleep(0.3)
    chosen = os.environ.get("BOX_BROWSER", "").strip()
    if chosen:
        argv = shlex.split(chosen)
    else:
        found = next((opener for opener in OPENERS if shutil.which(opener[0])), None)
        if found is None:
            raise BoxError(
                "no browser opener found",
                "none of xdg-open, gio or open is installed",
                "set BOX_BROWSER to a command that opens a URL in your browser",
            )
        argv = list(found)
    # The URL holds the token: it is the opener's sole argument of ours, and nothing the opener
    # prints (some echo the URL in their errors) reaches this command's output.
    try:
        opener = subprocess.Popen(
            [*argv, endpoint.secret_url(port, token)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise BoxError(f"cannot run the browser command {argv[0]}", exc.strerror or str(exc), "check BOX_BROWSER")
    try:
        code = opener.wait(timeout=BROWSER_WAIT_S)
    except subprocess.TimeoutExpired:
        code = 0  # a browser that stays in the foreground: left running
    if code != 0:
        raise BoxError(f"the browser command {argv[0]} failed (exit {code})", "", "set BOX_BROWSER to a working opener")
    note(f"opened box {name}'s endpoint {endpoint.host_url(port)} in the browser (the token is in the URL it got)")
    return 0


# --- helpers -------------------------------------------------------------------------------------


def _doctor(ctx: Context, name: str, *, as_json: bool) -> int:
    from reference.box_lite.doctor import print_report, run_doctor

    report = run_doctor(ctx.manager, ctx.home, ctx.settings, name)
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print_report(report, sys.stdout)
    return 0 if report.ok else 1


def _fd(fd: int) -> int | None:
    """``fd`` if this process has it open (a closed stdin gives the box command /dev/null)."""
    try:
        os.fstat(fd)
    except OSError:
        return None
    return fd


def _existing_file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise BadInput(f"no archive at {path}", "the path is not a file", "give the path of a .tar.gz.gpg archive")
    return path


def _env_pairs(pairs: Sequence[str] | None) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"--env {pair.split('=')[0]!r} is not KEY=VALUE", "", "write --env KEY=VALUE")
        env[key] = value
    return env


def _ask(prompt: str) -> str:
    """One line from stdin (the prompt on stderr); '' at end of input."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not sys.stdin.isatty():  # nothing echoed the answer: end the prompt's line
        sys.stderr.write("\n")
    return line.rstrip("\r\n").strip()


def _exit_status(code: int | None) -> int:
    if code is None:
        return 1
    return 128 - code if code < 0 else code


@contextlib.contextmanager
def _forward_signals() -> Iterator[Callable[[Callable[[int], None]], None]]:
    """While a box command runs, INT/TERM/HUP/QUIT go to it (its exit status then tells what happened).

    Yields ``forward(send)``, to call once the command exists: signals that arrived before are sent then.
    """
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    pending: list[int] = []
    target: list[Callable[[int], None]] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not target:
            pending.append(signum)
            return
        with contextlib.suppress(Exception):
            target[0](signum)

    def forward(send: Callable[[int], None]) -> None:
        target.append(send)
        while pending:
            with contextlib.suppress(Exception):
                send(pending.pop(0))

    old = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield forward
    finally:
        for s, previous in old.items():
            signal.signal(s, previous)


@contextlib.contextmanager
def _progress(label: str, phases: Sequence[str]) -> Iterator[Callable[[int, int | None], None] | None]:
    """A progress callback ``(done_bytes, total_bytes | None)`` drawing a rich bar on a terminal; None otherwise.

    The work runs in passes over the data (write then verify, validate then restore): a count that
    goes back down starts the next of ``phases``, named in the bar.  The bar appears at the first
    count, so whatever the work asks first (the passphrase, and its confirmation on a save) is asked
    on a terminal nothing draws over.
    """
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
    )
    bar = Progress(*columns, console=Console(stderr=True), transient=True)
    task = bar.add_task(f"{label}: {phases[0]}", total=None)
    state = {"phase": 0, "done": 0, "shown": 0}

    def update(done: int, total: int | None = None) -> None:
        if not state["shown"]:
            bar.start()
            state["shown"] = 1
        if done < state["done"] and state["phase"] + 1 < len(phases):
            state["phase"] += 1
            bar.update(task, description=f"{label}: {phases[state['phase']]}")
        state["done"] = done
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if state["shown"]:
            bar.stop()


# --- argument parsing and the entry point --------------------------------------------------------


def _setting(key: str) -> Callable[[str], Any]:
    """An argparse type reading a flag as box.env's parser for ``key`` reads its value."""

    def parse(text: str) -> Any:
        try:
            value = KEYS[key].parse(text)
        except Invalid as exc:
            raise argparse.ArgumentTypeError(f"{text!r} {exc.problem}: {exc.fix}") from None
        return 0 if value is None else value  # off for this box, whatever box.env says

    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own usage errors: exit 2 with our prefix
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message} — see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, description="Local isolated boxes whose tools are replaceable and whose state is precious."
    )
    parser.add_argument(
        "--home", metavar="DIR", help="keep everything under DIR (default: $HERMES_BOX_HOME, else XDG dirs)"
    )
    parser.add_argument("--debug", action="store_true", help="tracebacks and the box manager's log on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def add(name: str, func: Callable[[Context, argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        return p

    p = add("new", cmd_new, "create and provision a box, start it and run its doctor")
    p.add_argument("name")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--no-network", dest="network", action="store_false", default=None, help="only loopback inside")
    group.add_argument("--network", dest="network", action="store_true", help="share the host's network (default)")
    p.add_argument("--no-doctor", action="store_true", help="skip the doctor after creating")
    for flag, key in (("--pids-max", "PIDS_MAX"), ("--memory-max", "MEMORY_MAX"), ("--cpu-max", "CPU_MAX")):
        p.add_argument(flag, type=_setting(key), metavar=key, help=f"this box's {KEYS[key].help} (over box.env's)")

    p = add("ls", cmd_ls, "list boxes: state and most recent backup")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("enter", cmd_enter, "start the box if needed and attach its tmux session under ~/workspace")
    p.add_argument("name")
    p.add_argument("--no-tmux", action="store_true", help="a plain login shell instead of the tmux session")

    p = add("exec", cmd_exec, "run one command in the box and exit with its exit code")
    p.add_argument("name")
    p.add_argument("--cwd", default=WORKSPACE_INSIDE, help=f"directory inside the box (default {WORKSPACE_INSIDE})")
    p.add_argument("--env", action="append", metavar="KEY=VALUE", help="extra environment variable (repeatable)")
    p.add_argument("-t", "--tty", action="store_true", help="give the command a terminal (stdin must be one)")
    p.add_argument("--root", action="store_true", help="run as the box's root instead of its agent")
    p.add_argument(
        "argv",
        nargs="*",
        metavar="-- CMD ...",
        help="the command and its arguments, after --; a quoted ~/ means the box's home",
    )

    p = add("open", cmd_open, "wait for the box's forwarded endpoint, then open it in the browser (token in the URL)")
    p.add_argument("name")

    p = add("stop", cmd_stop, "stop every process of the box, keeping its state")
    p.add_argument("name")
    p = add("start", cmd_start, "start a stopped box")
    p.add_argument("name")

    p = add("doctor", cmd_doctor, "check the box (bounded, one row per check with a fix)")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("repair", cmd_repair, "refresh managed assets and wiring, keep /data, run the doctor")
    p.add_argument("name")

    p = add("rm", cmd_rm, "remove a box and its /data (asks for the exact name)")
    p.add_argument("name")
    p.add_argument("--force", action="store_true", help="do not ask (for scripts)")

    p = add("save", cmd_save, "write an encrypted, verified backup of the box's /data")
    p.add_argument("name")
    p.add_argument("--out", metavar="PATH", help="archive path (default backups/NAME-<UTC time>.tar.gz.gpg)")

    p = add("load", cmd_load, "create a new box from an encrypted backup (validated before anything is created)")
    p.add_argument("archive")
    p.add_argument("name", metavar="NEWNAME")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--no-network", dest="network", action="store_false", default=None, help="only loopback inside (overrides)"
    )
    group.add_argument("--network", dest="network", action="store_true", help="share the host's network (overrides)")

    p = add("extract", cmd_extract, "validate an encrypted backup and unpack it into a new directory under backups/")
    p.add_argument("archive")
    return parser


def _print_error(what: str, why: str, fix: str, stream: IO[str]) -> None:
    stream.write(f"error: {what}" + (f" — {fix}" if fix else "") + "\n")
    if why:
        stream.write(f"  ({why})\n")
    stream.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is exec's command, never options of hermes-box (so `exec NAME
    # --env K=V -- CMD -x` parses): the rest is parsed as usual.
    after: list[str] | None = None
    if "--" in words:
        cut = words.index("--")
        words, after = words[:cut], words[cut + 1 :]
    args = parser.parse_args(words)
    args.after_dashes = after
    if after is not None and args.command != "exec":
        parser.error(f"'--' and a command follow only `{PROG} exec NAME`")
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(name)s: %(message)s",
        stream=sys.stderr,
    )
    for signum in WATCHED:  # each ends the command as 128+N, after the interrupted work cleaned up
        signal.signal(signum, raise_interrupted)
    try:
        ctx = Context(BoxHome.resolve(args.home), args.debug)
        return int(args.func(ctx, args))
    except BoxError as exc:
        if args.debug:
            traceback.print_exc()
        fix = exc.fix or ("what the command had made was cleaned up" if isinstance(exc, BoxInterrupted) else "")
        _print_error(exc.what, exc.why, fix, sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # whatever read our stdout went away (`hermes-box ls | head -1`)
        _drop_stdout()
        return 1
    except OSError as exc:
        if args.debug:
            raise
        _print_error(f"{exc.strerror or exc}", str(exc.filename or ""), "rerun with --debug for details", sys.stderr)
        return 1
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _drop_stdout()


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that nothing more (not even the flush at exit) writes to a closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())

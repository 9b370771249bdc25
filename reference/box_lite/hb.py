"""``hb``: the box's own helper, run inside a Box Lite box (standard library only).

Provisioning copies this file and ``mcp_probe`` to the box's read-only
``/run/hermes-box`` and puts ``hb`` on its PATH (``/usr/local/bin/hb``).  It talks to
the box's daemon through ``/run/hermes-box/hb.sock`` (one JSON request a line, one
answer), which every account of the box may use, so ``hb`` works for root and for a
user alike; it writes only into the invoking user's own home (``wire-mcp``).

- ``hb status``: the workload's state, the tools layer, /data's usage;
- ``hb versions``: the version each tool found in the box reports;
- ``hb doctor``: the in-box checks (the workload, its MCP handshake, the tools, /data);
- ``hb logs [workload] [-n N]``: the workload's log;
- ``hb up`` / ``hb down``: resume / pause the workload (the pause survives restarts);
- ``hb wire-mcp``: register the workload's authenticated HTTP MCP endpoint with Claude
  Code (``~/.claude.json``) and Codex (``~/.codex/config.toml``), replacing a stale
  stdio registration of the same server.

Exit codes: 0 done, 1 a check failed or the daemon refused, 2 bad usage.  The token
never appears in any output.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

try:
    from reference.box_lite import mcp_probe
except ImportError:  # in the box: this file and mcp_probe.py side by side in /run/hermes-box
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import mcp_probe  # type: ignore[import-not-found,no-redef]

SOCKET = "/run/hermes-box/hb.sock"
ENV_FILE = "/etc/hermes-box.env"
DATA = "/data"
TIMEOUT_S = 5.0
DOWN_TIMEOUT_S = 30.0
# The tools of a box's machine, as ``hb versions`` asks them and provisioning records them (machine.py).
TOOLS = (
    ("sudo", ["sudo", "--version"]),
    ("hermes", ["hermes", "--version"]),
    ("node", ["node", "--version"]),
    ("claude", ["claude", "--version"]),
    ("codex", ["codex", "--version"]),
    ("nvim", ["nvim", "--version"]),
    ("executor", ["executor", "--version"]),
    ("python", ["python3", "--version"]),
)


class Refused(Exception):
    """The daemon could not be asked, or said no."""


def ask(message: dict[str, Any], timeout: float = TIMEOUT_S) -> dict[str, Any]:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(SOCKET)
            sock.sendall(json.dumps(message).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise Refused(f"cannot reach the box's daemon at {SOCKET}: {exc.strerror or exc}") from None
    try:
        answer = json.loads(data or b"{}")
    except ValueError:
        raise Refused("the box's daemon gave an unreadable answer") from None
    if not isinstance(answer, dict):
        raise Refused("the box's daemon gave an unreadable answer")
    if answer.get("op") == "error":
        raise Refused(str(answer.get("message")))
    return answer


def settings() -> dict[str, str]:
    """/etc/hermes-box.env's KEY=VALUE lines (values unquoted as the host wrote them)."""
    found: dict[str, str] = {}
    try:
        text = Path(ENV_FILE).read_text()
    except OSError:
        return found
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            found[key.strip()] = value
    return found


# --- status, versions, logs, up, down ---------------------------------------------------------------


def describe(record: dict[str, Any] | None) -> str:
    if not record:
        return "none (no WORKLOAD in box.env)"
    state = str(record.get("state"))
    parts = [state]
    if record.get("pid"):
        parts.append(f"host pid {record['pid']}")
    parts.append(f"port {record.get('port')}")
    parts.append(f"restarts {record.get('restarts', 0)}")
    if record.get("last_exit") is not None:
        parts.append(f"last exit {record['last_exit']}")
    if state == "paused":
        parts.append("hb up resumes it")
    return ", ".join(parts)


def data_usage(seconds: float = 2.0) -> str:
    st = os.statvfs(DATA)
    free = st.f_bavail * st.f_frsize
    total, counted, complete = 0, 0, True
    deadline = time.monotonic() + seconds
    for folder, _dirs, files in os.walk(DATA):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
            counted += 1
        if time.monotonic() > deadline:
            complete = False
            break
    used = _size(total) + ("" if complete else "+ (not all counted in time)")
    return f"{used} in {counted} files; {_size(free)} free on its file system"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def tools_layer() -> str:
    image = settings().get("BASE_IMAGE", "")
    return f"{image} (BASE_IMAGE)" if image else "none: the host's system directories, read-only"


def cmd_status(args: argparse.Namespace) -> int:
    try:
        answer = ask({"op": "workload", "action": "status"})
        work, shown_endpoint = answer.get("workload"), answer.get("endpoint")
    except Refused as exc:
        work, shown_endpoint = None, None
        print(f"workload:    unknown ({exc})")
    else:
        print(f"workload:    {describe(work)}")
    if shown_endpoint:
        port = shown_endpoint.get("host_port")
        print(f"endpoint:    host 127.0.0.1:{port}" + ("" if shown_endpoint.get("listening") else " (not listening)"))
    print(f"tools layer: {tools_layer()}")
    print(f"/data:       {data_usage()}")
    return 0


def version_of(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return "not found"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"did not answer ({type(exc).__name__})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip()[:100] if lines else f"no version printed (exit {done.returncode})"


def cmd_versions(args: argparse.Namespace) -> int:
    width = max(len(name) for name, _ in TOOLS)
    for name, argv in TOOLS:
        print(f"{name.ljust(width)}  {version_of(argv)}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    if args.what not in (None, "workload", "executor"):
        print(f"error: no log named {args.what!r} — hb logs [workload]", file=sys.stderr)
        return 2
    answer = ask({"op": "workload", "action": "logs", "lines": args.lines})
    if "log" not in answer:
        print(f"error: {answer.get('why') or 'no workload log'} — set WORKLOAD in box.env", file=sys.stderr)
        return 1
    text = str(answer.get("log") or "")
    print(text if text else "(the log is empty)")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    answer = ask({"op": "workload", "action": "up"})
    print(f"workload: {describe(answer.get('workload'))}")
    return 0 if answer.get("workload") else 1


def cmd_down(args: argparse.Namespace) -> int:
    answer = ask({"op": "workload", "action": "down"}, timeout=DOWN_TIMEOUT_S)
    print(f"workload: {describe(answer.get('workload'))}")
    return 0 if answer.get("workload") else 1


# --- doctor ----------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    rows: list[tuple[str, str, str]] = []
    try:
        answer = ask({"op": "workload", "action": "status"})
        work = answer.get("workload")
    except Refused as exc:
        work = None
        rows.append(("fail", "workload", str(exc)))
    else:
        if not work:
            rows.append(("skip", "workload", "none (no WORKLOAD in box.env)"))
        elif work.get("state") == "running":
            rows.append(("ok", "workload", describe(work)))
        else:
            rows.append(("fail", "workload", describe(work)))
    if work:
        rows.append(mcp_row(work))
    for name, argv in TOOLS:
        found = shutil.which(argv[0])
        rows.append(("ok" if found else "warn", f"tool {name}", found or "not found on PATH"))
    rows.append(data_row())
    width = max(len(r[1]) for r in rows)
    for status, name, detail in rows:
        print(f"{status.upper():4}  {name.ljust(width)}  {detail}")
    failed = any(r[0] == "fail" for r in rows)
    print("in-box checks: " + ("NOT healthy" if failed else "healthy"))
    return 1 if failed else 0


def mcp_row(work: dict[str, Any]) -> tuple[str, str, str]:
    try:
        wiring = ask({"op": "mcp"})
    except Refused as exc:
        return ("skip", "MCP", str(exc))
    if work.get("state") == "paused":
        return ("fail", "MCP", "the workload is paused (hb down); hb up resumes it")
    port = int(work.get("port") or 0)
    path = re.sub(r"^http://[^/]+", "", str(wiring.get("url")))
    outcome = mcp_probe.handshake(
        mcp_probe.tcp(port), path=path, token=str(wiring.get("token")), timeout=TIMEOUT_S, host=f"127.0.0.1:{port}"
    )
    return ("ok" if outcome.ok else "fail", "MCP", f"127.0.0.1:{port}{path}: {outcome.detail}")


def data_row() -> tuple[str, str, str]:
    probe = Path(DATA) / ".hermes-box" / f"hb-probe-{os.getpid()}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text("probe")
        probe.unlink()
    except OSError as exc:
        return ("fail", "/data", f"not writable: {exc.strerror or exc}")
    return ("ok", "/data", "writable")


# --- wire-mcp --------------------------------------------------------------------------------------


def write_private(path: Path, text: str) -> None:
    """``text`` as ``path`` (mode 0600: it holds the token), replaced atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.hb-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def wire_claude(home: Path, name: str, url: str, token: str) -> str:
    path = home / ".claude.json"
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        raise Refused(f"{path} is not JSON; fix or move it, then run hb wire-mcp again") from None
    if not isinstance(data, dict):
        raise Refused(f"{path} is not a JSON object; fix or move it, then run hb wire-mcp again")
    replaced = []
    for project in (data.get("projects") or {}).values():  # a stale per-project stdio registration
        servers = project.get("mcpServers") if isinstance(project, dict) else None
        if isinstance(servers, dict) and isinstance(servers.get(name), dict) and "command" in servers[name]:
            del servers[name]
            replaced.append("a project's stdio entry")
    servers = data.setdefault("mcpServers", {})
    if isinstance(servers.get(name), dict) and "command" in servers[name]:
        replaced.append("the stdio entry")
    servers[name] = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    write_private(path, json.dumps(data, indent=2) + "\n")
    return f"{path}: {name} -> {url}" + (f" (replaced {', '.join(replaced)})" if replaced else "")


def wire_codex(home: Path, name: str, url: str, token: str) -> str:
    path = home / ".codex" / "config.toml"
    text = path.read_text() if path.exists() else ""
    kept: list[str] = []
    skipping = False
    stale = False
    table = re.compile(r"^\s*\[\s*mcp_servers\s*\.\s*(\"?)" + re.escape(name) + r"\1\s*(\.[^\]]*)?\]\s*(#.*)?$")
    for line in text.splitlines():
        if line.lstrip().startswith("["):
            skipping = bool(table.match(line))
        if skipping:
            stale = stale or line.strip().startswith("command")
            continue
        kept.append(line)
    body = "\n".join(kept).rstrip()
    block = "\n".join(
        [
            f"[mcp_servers.{name}]",
            f"url = {json.dumps(url)}",
            f"http_headers = {{ Authorization = {json.dumps('Bearer ' + token)} }}",
        ]
    )
    write_private(path, (body + "\n\n" if body else "") + block + "\n")
    return f"{path}: {name} -> {url}" + (" (replaced the stdio entry)" if stale else "")


def cmd_wire_mcp(args: argparse.Namespace) -> int:
    wiring = ask({"op": "mcp"})
    name, url, token = str(wiring["name"]), str(wiring["url"]), str(wiring.get("token") or "")
    if not token:
        raise Refused("the box has no endpoint token; run hermes-box repair NAME on the host")
    home = Path(os.environ.get("HOME") or os.path.expanduser("~"))
    print(wire_claude(home, name, url, token))
    print(wire_codex(home, name, url, token))
    return 0


# --- entry point -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hb", description="this box's helper: its workload, tools and MCP wiring")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser("status", help="the workload's state, the tools layer, /data's usage").set_defaults(func=cmd_status)
    sub.add_parser("versions", help="the version of each tool found in the box").set_defaults(func=cmd_versions)
    sub.add_parser("doctor", help="the in-box checks").set_defaults(func=cmd_doctor)
    p = sub.add_parser("logs", help="the workload's log")
    p.add_argument("what", nargs="?", metavar="workload")
    p.add_argument("-n", "--lines", type=int, default=100)
    p.set_defaults(func=cmd_logs)
    sub.add_parser("up", help="resume the workload").set_defaults(func=cmd_up)
    sub.add_parser("down", help="pause the workload (kept across restarts until hb up)").set_defaults(func=cmd_down)
    sub.add_parser("wire-mcp", help="register the workload's MCP with Claude Code and Codex").set_defaults(
        func=cmd_wire_mcp
    )
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except Refused as exc:
        print(f"error: {exc} — see hb status; on the host, hermes-box doctor", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

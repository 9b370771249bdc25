"""A box's supervised workload, its forwarded endpoint, `open`, `hb` and the doctor's MCP rows,
with real boxes, a real MCP server (the ``mcp`` SDK's streamable HTTP server) as the
workload, real HTTP on loopback and the real ``hermes-box`` and ``hb`` commands.

The MCP server runs inside a box with the box's Python (the host's /usr/bin/python3):
the SDK and its dependencies are copied once per session from this environment's
site-packages, then linked into each box's /data with the server script
(``mcp_fixture_server.py``).  Its mode (ok, bare, 404, 500, malformed) is read from
/data at each start, so one box serves every mode.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from isolation import NamespaceDriver
from reference.box_lite import endpoint, mcp_probe
from reference.box_lite.boxes import BoxManager
from reference.box_lite.paths import BoxHome

_OK, _WHY = NamespaceDriver(spares=0).available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}")

ROOT = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("mcp_fixture_server.py")
BOX_PYTHON = "/usr/bin/python3"
FIXTURE = "mcp-fixture"  # in the box's /data
WORKLOAD = f'PYTHONPATH=/data/{FIXTURE}/site exec python3 -B /data/{FIXTURE}/server.py "$(cat /data/{FIXTURE}/mode)"'
READY_S = 30.0
_SITE_PROBE = """
import os, sys, site
import uvicorn, uvicorn.loops.auto, uvicorn.protocols.http.auto, uvicorn.protocols.http.h11_impl
import uvicorn.protocols.websockets.auto, uvicorn.lifespan.on
import mcp.server.fastmcp, starlette.applications, starlette.responses
roots = [p for p in sys.path if p.endswith("site-packages")]
tops = set()
for module in list(sys.modules.values()):
    where = getattr(module, "__file__", None) or ""
    for root in roots:
        if where.startswith(root + os.sep):
            tops.add(os.path.join(root, os.path.relpath(where, root).split(os.sep)[0]))
tops = {t for t in tops if not os.path.basename(t).startswith(("__editable__", "_distutils"))}
import importlib.metadata as md
names = {os.path.basename(t).removesuffix(".py") for t in tops}
for top, dists in md.packages_distributions().items():  # their metadata too (mcp reads its version)
    if top in names:
        for dist in dists:
            info = {f.parts[0] for f in (md.distribution(dist).files or ()) if f.parts[0].endswith(".dist-info")}
            tops |= {os.path.join(roots[0], i) for i in info if os.path.isdir(os.path.join(roots[0], i))}
print("\\n".join(sorted(tops)))
"""


def _box_python_matches() -> str:
    """Why the box's Python cannot run the copied SDK ("" when it can: the same minor version)."""
    if not os.path.exists(BOX_PYTHON):
        return f"no {BOX_PYTHON} on this machine"
    done = subprocess.run([BOX_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    mine = str(tuple(sys.version_info[:2]))
    return "" if done.stdout.strip() == mine else f"{BOX_PYTHON} is {done.stdout.strip()}, this Python {mine}"


@pytest.fixture(scope="session")
def mcp_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``mcp`` SDK and what its server imports, copied from this environment (no byte code)."""
    pytest.importorskip("mcp")
    why = _box_python_matches()
    if why:
        pytest.skip(f"the box's Python cannot run this environment's mcp SDK: {why}")
    site = tmp_path_factory.mktemp("mcp-site")
    done = subprocess.run([sys.executable, "-c", _SITE_PROBE], capture_output=True, text=True, check=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for source in map(Path, done.stdout.split()):
        if source.is_dir():
            shutil.copytree(source, site / source.name, ignore=ignore)
        else:
            shutil.copy2(source, site / source.name)
    return site


def _populate(site: Path, mode: str) -> Any:
    def populate(data: Path) -> None:
        fixture = data / FIXTURE
        fixture.mkdir()

        def link(src: str, dst: str) -> None:
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)

        shutil.copytree(site, fixture / "site", copy_function=link)
        shutil.copy2(SERVER, fixture / "server.py")
        (fixture / "mode").write_text(mode)

    return populate


def _ports() -> tuple[int, int]:
    """The workload's port and the first forwarded one, apart for each xdist worker: boxes that share the
    host's network bind their workload's port on the host's loopback, and tests run side by side."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    offset = 100 * (int(worker) if worker.isdigit() else 0)
    return 8931 + offset, 28700 + offset


def _settings(box_home: Path, expose: bool = True, **extra: str) -> None:
    config = box_home / "config"
    config.mkdir(exist_ok=True)
    inside, forwarded = _ports()
    lines = {
        "WORKLOAD": f"'{WORKLOAD}'",
        "WORKLOAD_PORT": str(inside),
        "EXPOSE_EXECUTOR_WEB": "on" if expose else "off",
        "EXECUTOR_PORT_LO": str(forwarded),
        "EXECUTOR_PORT_HI": str(forwarded + 99),
        **extra,
    }
    (config / "box.env").write_text("".join(f"{k}={v}\n" for k, v in lines.items()))


def hermes_box(box_home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "reference.box_lite.cli", "--home", str(box_home), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def doctor_rows(box_home: Path, name: str) -> dict[str, dict[str, str]]:
    done = hermes_box(box_home, "doctor", name, "--json")
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def wait_healthy(box_home: Path, name: str, rows: tuple[str, ...] = ("MCP in box",)) -> dict[str, dict[str, str]]:
    deadline = time.monotonic() + READY_S
    while True:
        found = doctor_rows(box_home, name)
        if all(found.get(r, {}).get("status") == "ok" for r in rows) or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


@pytest.fixture
def mcp_box(box_home: Path, manager: BoxManager, mcp_site: Path) -> Iterator[str]:
    """Box ``alpha`` (its own network namespace) whose workload is the fixture MCP server, exposed."""
    _settings(box_home)
    made = BoxManager(BoxHome.at(box_home))
    made.create("alpha", network=False, populate=_populate(mcp_site, "ok"))
    yield "alpha"


def _set_mode(manager: BoxManager, name: str, mode: str) -> None:
    (manager.data_dir(name) / FIXTURE / "mode").write_text(mode)
    assert manager.workload_status(name, "down")["workload"]["state"] == "paused"
    assert manager.workload_status(name, "up")["workload"]["state"] in ("starting", "running")


@pytest.mark.suite
def test_the_doctor_speaks_mcp_and_hb_down_pauses_across_restarts(box_home: Path, mcp_box: str) -> None:
    rows = wait_healthy(box_home, mcp_box, ("MCP in box", "MCP host"))
    assert rows["workload"]["status"] == "ok", rows
    assert rows["MCP in box"]["status"] == "ok" and "protocol 20" in rows["MCP in box"]["detail"], rows
    assert rows["MCP host"]["status"] == "ok" and "on the host" in rows["MCP host"]["detail"], rows

    down = hermes_box(box_home, "exec", mcp_box, "--", "hb", "down")
    assert down.returncode == 0 and "paused" in down.stdout, down
    for _ in range(2):  # paused, and kept paused by a stop and a start of the box
        rows = doctor_rows(box_home, mcp_box)
        for row in ("workload", "MCP in box", "MCP host"):
            assert rows[row]["status"] == "fail" and "paused" in rows[row]["detail"], rows
        procs = hermes_box(box_home, "exec", mcp_box, "--", "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert "cat /proc/1/cmdline" in procs.stdout and "server.py" not in procs.stdout, procs  # listed: none
        assert hermes_box(box_home, "stop", mcp_box).returncode == 0
        assert hermes_box(box_home, "start", mcp_box).returncode == 0
        time.sleep(1.5)  # longer than the supervisor's first backoff: a restart would show

    up = hermes_box(box_home, "exec", mcp_box, "--", "hb", "up")
    assert up.returncode == 0, up
    rows = wait_healthy(box_home, mcp_box, ("MCP in box", "MCP host"))
    assert rows["MCP in box"]["status"] == "ok" and rows["MCP host"]["status"] == "ok", rows
    status = hermes_box(box_home, "exec", mcp_box, "--", "hb", "status")
    assert "running" in status.stdout and "/data:" in status.stdout, status
    inside = hermes_box(box_home, "exec", mcp_box, "--", "hb", "doctor")
    assert inside.returncode == 0 and "OK    MCP" in inside.stdout, inside.stdout


@pytest.mark.suite
@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("bare", "no HTTP answer in time"),
        ("404", "HTTP 404"),
        ("500", "HTTP 500"),
        ("malformed", "protocol version"),
    ],
)
def test_the_doctor_fails_the_mcp_rows_of_a_broken_server(
    box_home: Path, mcp_box: str, manager: BoxManager, mode: str, said: str
) -> None:
    wait_healthy(box_home, mcp_box)
    _set_mode(manager, mcp_box, mode)
    deadline = time.monotonic() + READY_S
    while True:
        rows = doctor_rows(box_home, mcp_box)
        if said in rows["MCP in box"]["detail"] or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert rows["workload"]["status"] == "ok", rows  # it runs: only the handshake fails
    for row in ("MCP in box", "MCP host"):
        assert rows[row]["status"] == "fail" and said in rows[row]["detail"], rows


@pytest.mark.suite
def test_open_gives_the_browser_one_secret_url(box_home: Path, mcp_box: str, tmp_path: Path) -> None:
    record = tmp_path / "record"
    got = tmp_path / "got"
    record.write_text(f'#!/bin/sh\nprintf "%s\\n" "$#" "$@" > {got}\n')
    record.chmod(0o755)
    token = endpoint.read_token(BoxHome.at(box_home).box(mcp_box))
    assert token
    repaired = hermes_box(box_home, "repair", mcp_box)  # publishes the runtime manifest, wires the MCP
    assert "wired the workload's MCP endpoint" in repaired.stderr, repaired
    done = hermes_box(box_home, "open", mcp_box, env={"BOX_BROWSER": str(record)})
    assert done.returncode == 0, done
    count, url = got.read_text().split("\n")[:2]
    assert count == "1" and token in url and url.startswith("http://127.0.0.1:")
    base = url.split("?")[0]
    with httpx.Client(follow_redirects=True, timeout=10) as client:  # a browser: the cookie after the redirect
        answer = client.get(url)
        assert answer.status_code != 401 and answer.url.query == b""
        again = client.get(base + "mcp", headers={"Accept": "text/event-stream"})  # the cookie alone suffices
        assert again.status_code != 401
    assert httpx.get(base, timeout=10).status_code == 401
    assert httpx.get(base + "mcp", headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401

    listing = hermes_box(box_home, "ls")
    assert base in listing.stdout
    outputs = [done.stdout, done.stderr, listing.stdout, listing.stderr, hermes_box(box_home, "ls", "--json").stdout]
    outputs += [repaired.stdout, repaired.stderr]
    outputs += [
        hermes_box(box_home, "doctor", mcp_box).stdout,
        hermes_box(box_home, "exec", mcp_box, "--", "hb", "status").stdout,
    ]
    logs = [p for p in box_home.rglob("*.log*") if p.is_file()]
    assert logs
    for text in outputs + [p.read_text(errors="replace") for p in logs]:
        assert token not in text
    manifest = box_home / "config" / "runtime-manifest"
    assert oct(manifest.stat().st_mode & 0o777) == "0o600" and token in manifest.read_text()


@pytest.mark.suite
def test_a_failing_workload_is_restarted_with_backoff_and_its_log_kept(box_home: Path, manager: BoxManager) -> None:
    _settings(box_home, expose=False, WORKLOAD="'echo run $WORKLOAD_PORT; exit 3'", WORKLOAD_MCP_PATH="off")
    made = BoxManager(BoxHome.at(box_home))
    made.create("beta")
    time.sleep(3.3)  # runs at 0 s, then after 1 s and 2 s of backoff
    state = made.workload_status("beta")["workload"]
    assert state["state"] in ("backoff", "running") and state["restarts"] >= 2 and state["last_exit"] == 3, state
    log = made.workload_status("beta", "logs")["log"]
    assert log.count(f"run {_ports()[0]}") >= 2 and "restart 2 in 2 s" in log, log
    rows = doctor_rows(box_home, "beta")
    assert rows["workload"]["status"] == "fail" and "MCP in box" not in rows, rows


def test_hb_wire_mcp_replaces_stale_stdio_wiring(box_home: Path, manager: BoxManager) -> None:
    _settings(box_home, expose=False, WORKLOAD="'exec sleep 600'", WIRE_EXECUTOR_MCP="off")
    made = BoxManager(BoxHome.at(box_home))
    made.create("gamma")
    home = made.home.box("gamma").home
    claude_stale = json.dumps({"mcpServers": {"box-workload": {"command": "npx"}}, "keep": 1})
    codex_stale = '[mcp_servers.box-workload]\ncommand = "npx"\n\n[other]\nx = 1\n'
    script = 'printf %s "$1" > ~/.claude.json && mkdir ~/.codex && printf %s "$2" > ~/.codex/config.toml'
    made.exec("gamma", ["sh", "-c", script, "sh", claude_stale, codex_stale])  # written in the box, as its user
    done = hermes_box(box_home, "exec", "gamma", "--", "hb", "wire-mcp")
    assert done.returncode == 0 and "replaced the stdio entry" in done.stdout, done
    token = endpoint.read_token(made.home.box("gamma"))
    assert token and token not in done.stdout + done.stderr
    claude = json.loads((home / ".claude.json").read_text())
    server = claude["mcpServers"]["box-workload"]
    assert server == {
        "type": "http",
        "url": f"http://127.0.0.1:{_ports()[0]}/mcp",
        "headers": {"Authorization": f"Bearer {token}"},
    }
    assert claude["keep"] == 1
    codex = (home / ".codex" / "config.toml").read_text()
    assert 'command = "npx"' not in codex and "[other]\nx = 1" in codex
    assert f'http_headers = {{ Authorization = "Bearer {token}" }}' in codex and "url = " in codex
    assert oct((home / ".codex" / "config.toml").stat().st_mode & 0o777) == "0o600"


def test_a_box_without_a_workload_has_no_workload_rows_and_hb_says_so(box_home: Path, manager: BoxManager) -> None:
    manager.create("plain")
    rows = doctor_rows(box_home, "plain")
    assert not {"workload", "MCP in box", "MCP host"} & set(rows)
    done = hermes_box(box_home, "exec", "plain", "--", "hb", "status")
    assert done.returncode == 0 and "workload:    none" in done.stdout, done
    done = hermes_box(box_home, "exec", "plain", "--", "hb", "versions")
    assert done.returncode == 0 and "python" in done.stdout, done


def test_the_handshake_needs_a_listener() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = mcp_probe.handshake(mcp_probe.tcp(port), path="/mcp", token="t", timeout=2)
    assert not outcome.ok and "connection refused" in outcome.detail


def test_save_quiesces_the_workload_and_load_starts_it_once_restored(
    box_home: Path, manager: BoxManager, tmpdir_root: Path
) -> None:
    import archives
    from reference.box_lite import backup, workload
    from tests.archives.craft import PASSPHRASE

    _settings(box_home, expose=False, WORKLOAD="'echo up; exec sleep 600'", WORKLOAD_MCP_PATH="off")
    made = BoxManager(BoxHome.at(box_home))
    made.create("delta")
    deadline = time.monotonic() + 10
    while made.workload_status("delta")["workload"]["state"] != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    secret = archives.Passphrase(PASSPHRASE)
    path = backup.save(made, "delta", passphrase=secret)
    log = workload.log_path(made.home.box("delta"))
    deadline = time.monotonic() + 10
    while log.read_text().count("started") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    text = log.read_text()
    ended = text.index("for quiesced")  # ended before the archive was written, started again after
    assert text.index("started", ended) > ended and made.workload_status("delta")["workload"]["restarts"] == 0
    assert made.workload_status("delta")["workload"]["state"] == "running"

    backup.load(made, path, "echo", passphrase=secret)
    assert not workload.held_marker(made.home.box("echo")).exists()
    deadline = time.monotonic() + 10
    while made.workload_status("echo")["workload"]["state"] != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert made.workload_status("echo")["workload"]["state"] == "running"


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="no setpriv here to run hb as a user")
def test_hb_works_for_a_user_of_the_box_too(box_home: Path, manager: BoxManager) -> None:
    _settings(box_home, expose=False, WORKLOAD="'exec sleep 600'")
    made = BoxManager(BoxHome.at(box_home))
    made.create("zeta")
    # As the box's agent where the box is a machine (exec's default user), else uid 1000 made by setpriv.
    user = (
        []
        if (made.box_json("zeta") or {}).get("machine")
        else ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"]
    )
    script = "mkdir -p /tmp/user && id -u && hb down && hb up && hb wire-mcp && stat -c %u:%a ~/.claude.json"
    done = hermes_box(box_home, "exec", "zeta", "--", *user, "env", "HOME=/tmp/user", "sh", "-c", script)
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert lines[0] == "1000" and "paused" in lines[1] and lines[-1] == "1000:600", done.stdout
    token = endpoint.read_token(made.home.box("zeta"))
    assert token and token not in done.stdout + done.stderr


def test_the_workload_settings_round_trip_and_refuse_a_reversed_port_range() -> None:
    from reference.box_lite.errors import BadInput
    from reference.box_lite.settings import Settings

    command = """sh -c 'echo "$WORKLOAD_PORT"' # a comment-like tail"""
    written = Settings.parse(f"WORKLOAD={json.dumps(command)}\nEXPOSE_EXECUTOR_WEB=on\nWORKLOAD_MCP_PATH=off\n")
    again = Settings.parse(written.render())
    assert again.workload == command and again.expose_executor_web and again.workload_mcp_path is None
    with pytest.raises(BadInput) as refused:
        Settings.parse("EXECUTOR_PORT_LO=19000\nEXECUTOR_PORT_HI=18000\n")
    assert "EXECUTOR_PORT_LO (19000) is above EXECUTOR_PORT_HI (18000)" in refused.value.what
    with pytest.raises(BadInput):
        Settings.parse("WORKLOAD_PORT=70000\n")

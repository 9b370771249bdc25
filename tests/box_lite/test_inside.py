"""What a Box Lite box looks like from inside, checked with real commands in a real box.

The host's files (a file planted under this test's tmp dir, /root) are out of
view; /etc is read-only yet shows the managed /etc/hermes-box.env, readable
and not writable; /proc lists only the box's own processes; a box without
network has only a loopback interface, which works; a terminal command gets a
terminal of the box's own.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from isolation import ROOT_ID_BASE, NamespaceDriver
from reference.box_lite.boxes import BoxManager
from reference.box_lite.settings import Settings

_OK, _WHY = NamespaceDriver(spares=0).available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}")


def run(manager: BoxManager, name: str, script: str) -> tuple[int, str]:
    command = manager.popen(name, ["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = command.communicate(timeout=30)
    return command.returncode, out.decode(errors="replace")


@pytest.fixture
def box(manager: BoxManager) -> str:
    manager.create("inside")
    return "inside"


def test_host_files_are_out_of_view(manager: BoxManager, box: str, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("canary-" + secrets.token_hex(8))
    os.chmod(secret, 0o644)
    code, out = run(
        manager,
        box,
        f"test -e {secret} && echo PLANTED-VISIBLE; test -e {tmp_path} && echo TMP-VISIBLE; "
        "ls -A /root 2>/dev/null; test -e /work && echo WORK-VISIBLE; ls /; true",
    )
    assert code == 0
    assert "VISIBLE" not in out, out
    top = {"bin", "data", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "opt", "proc", "run", "sbin"}
    if manager.machine() is not None:  # the root of its tools layer: the box's own /root (0700), /srv, /mnt
        top |= {"mnt", "root", "srv"}
    assert set(out.split()) <= top | {"tmp", "usr", "var"}, out  # the host's /root is absent, nothing else of it
    assert os.path.exists(secret)  # the host still has it


def test_etc_is_read_only_and_shows_the_managed_settings(manager: BoxManager, box: str) -> None:
    code, out = run(
        manager,
        box,
        "touch /etc/x 2>&1; echo touch=$?; "
        "cat /etc/hermes-box.env; echo read=$?; "
        "echo NETWORK=off >> /etc/hermes-box.env 2>&1; echo append=$?; "
        "rm -f /etc/hermes-box.env 2>&1; echo rm=$?; test -e /etc/passwd && echo passwd-present",
    )
    assert code == 0
    machine = manager.machine() is not None  # /etc is the tools layer's, which only the box's root writes
    assert "touch=1" in out and ("Permission denied" if machine else "Read-only file system") in out
    assert "read=0" in out and "append=0" not in out and "rm=1" in out and "passwd-present" in out
    assert "NETWORK=off" not in out
    assert Settings().render() in out  # the settings in effect, as the host rendered them
    if machine:  # even the box's root cannot change the managed settings, and writes no host file
        command = manager.popen(
            box,
            [
                "sh",
                "-c",
                "touch /etc/x; echo touch=$?; echo NETWORK=off >> /etc/hermes-box.env; echo append=$?; "
                "rm -f /etc/hermes-box.env; echo rm=$?",
            ],
            root=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out = command.communicate(timeout=30)[0].decode()
        assert "touch=0" in out and "append=0" not in out and "rm=0" not in out, out
    assert not os.path.exists("/etc/x") and not os.path.exists("/etc/hermes-box.env")  # the host's /etc untouched


def test_a_refresh_shows_in_the_running_box(manager: BoxManager, box: str, box_home: Path) -> None:
    (box_home / "config" / "box.env").write_text("TMUX=off\n")
    refreshed = BoxManager(manager.home)
    refreshed.refresh_assets(box)
    code, out = run(manager, box, "grep ^TMUX= /etc/hermes-box.env")
    assert (code, out) == (0, "TMUX=off\n")


def test_proc_shows_only_the_boxs_processes(manager: BoxManager, box: str) -> None:
    code, out = run(manager, box, "for p in /proc/[0-9]*; do echo ${p#/proc/} $(cat $p/comm); done")
    assert code == 0
    seen = dict(line.split(maxsplit=1) for line in out.splitlines())
    assert seen.get("1") == "box-init", seen
    assert set(seen.values()) <= {"box-init", "sh", "cat"}, seen  # not this test's python, nor anything else


def test_the_box_user_and_ids(manager: BoxManager, box: str) -> None:
    code, out = run(manager, box, "id -u; echo $USER $HOME; hostname; touch /data/mine; cd; pwd")
    agent = manager.machine() is not None  # commands run as the box's agent (uid 1000), else as its root
    assert (code, out.split()) == (0, ["1000" if agent else "0", "agent", "/home/agent", "inside", "/home/agent"])
    owner = (manager.data_dir(box) / "mine").stat().st_uid
    box_root = ROOT_ID_BASE if os.geteuid() == 0 else os.geteuid()
    assert owner == box_root + (1000 if agent else 0)  # ids inside the box own no host file


def test_no_network_box_has_only_a_working_loopback(manager: BoxManager) -> None:
    manager.create("offline", network=False)
    code, out = run(
        manager,
        "offline",
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
        'python3 -c \'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); '
        'c = socket.create_connection(s.getsockname(), timeout=5); print("loopback-ok")\'',
    )
    assert (code, out.split()) == (0, ["lo", "loopback-ok"]), out


def test_a_networked_box_shares_the_hosts_interfaces(manager: BoxManager, box: str) -> None:
    host = sorted(os.listdir("/sys/class/net"))
    code, out = run(manager, box, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert code == 0 and sorted(out.split()) == host


def test_a_tty_command_gets_a_terminal_of_the_boxs_own(manager: BoxManager, box: str) -> None:
    command = manager.popen(box, ["sh", "-c", "tty; echo rows=$(stty size)"], tty=True)
    assert command.pty is not None
    output = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([command.pty], [], [], 1)
        if ready:
            try:
                chunk = os.read(command.pty, 4096)
            except OSError:
                break  # every process on the terminal has ended
            if not chunk:
                break
            output += chunk
    assert command.wait(30) == 0
    text = output.decode(errors="replace")
    assert "/dev/pts/" in text and "rows=" in text, text
    command.close()


# -- the engine's optional extensions under other conditions ------------------------------------------
ENGINE_SCRIPT = """
import shutil, subprocess, sys, tempfile
from pathlib import Path
from isolation import Bind, BoxFile, BoxSpec, IsolationError, NamespaceDriver

driver = NamespaceDriver(spares=0)
ok, why = driver.available()
if not ok:
    print("UNAVAILABLE", why)
    sys.exit(0)
root = Path(tempfile.mkdtemp(prefix="box-lite-engine-"))
try:
    (root / "home").mkdir()
    (root / "env").write_text("FROM=host\\n")
    spec = BoxSpec(
        "engine",
        (Bind(root / "home", "/home/t"),),
        files=(BoxFile(root / "env", "/etc/hermes-box.env"),),
        network=False,
    )
    try:
        box = driver.start(spec)
    except IsolationError as exc:
        print("REFUSED", exc)
        sys.exit(0)
    script = "cat /etc/hermes-box.env /etc/hostname; touch /etc/x 2>/dev/null || echo etc-ro; "
    script += "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    proc = driver.spawn(box, ["sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(proc.communicate(timeout=30)[0].decode(), end="")
    driver.stop(box)
finally:
    shutil.rmtree(root, ignore_errors=True)
"""
ROOT = Path(__file__).resolve().parents[2]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _engine(prefix: list[str], python: str) -> str:
    """Run ENGINE_SCRIPT under ``prefix`` (another user, a mount namespace); its output."""
    argv = [*prefix, "env", f"PYTHONPATH={ROOT}", "TMPDIR=/tmp", python, "-c", ENGINE_SCRIPT]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if proc.stdout.startswith("UNAVAILABLE"):
        pytest.skip(proc.stdout)
    return proc.stdout


def _needs(*tools: str) -> None:
    if os.geteuid() != 0 or any(shutil.which(tool) is None for tool in tools):
        pytest.skip(f"needs root and {', '.join(tools)}")


def _unprivileged_python() -> str:
    """A python3 that user nobody can run and that imports the engine, or skip."""
    _needs("setpriv")
    for python in ("/usr/bin/python3", "/usr/local/bin/python3"):
        argv = [*NOBODY, "env", f"PYTHONPATH={ROOT}", python, "-c", "import isolation"]
        if os.path.exists(python) and subprocess.run(argv, capture_output=True, timeout=60).returncode == 0:
            return python
    pytest.skip("no python3 that an unprivileged user can run with the engine")


def _etc_with_a_mount(tmp_path: Path) -> list[str]:
    """A prefix running its command in a mount namespace where /etc/hostname is a mount of its own."""
    _needs("unshare")
    bound = tmp_path / "hostname"
    bound.write_text("bound-by-the-host\n")
    os.chmod(bound, 0o644)
    os.chmod(tmp_path, 0o755)  # reachable by the unprivileged user too
    script = 'mount --bind "$0" /etc/hostname && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(bound)]


def test_files_are_added_over_etcs_own_mounts(tmp_path: Path) -> None:
    """/etc with a mount of its own (a container's /etc/hostname): the file is added, that mount still shows."""
    out = _engine(_etc_with_a_mount(tmp_path), sys.executable)
    assert out.split() == ["FROM=host", "bound-by-the-host", "etc-ro", "lo"], out


def test_unprivileged_engine_adds_files_and_cuts_the_network() -> None:
    out = _engine(NOBODY, _unprivileged_python())
    assert out.split()[0] == "FROM=host" and out.split()[-2:] == ["etc-ro", "lo"], out


def test_unprivileged_engine_adds_files_over_etcs_own_mounts(tmp_path: Path) -> None:
    """Unprivileged, no overlay may cover an /etc holding mounts: the engine assembles /etc from binds instead."""
    python = _unprivileged_python()
    out = _engine([*_etc_with_a_mount(tmp_path), *NOBODY], python)
    assert out.split() == ["FROM=host", "bound-by-the-host", "etc-ro", "lo"], out

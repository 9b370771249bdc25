"""The box manager with real namespaces, real daemons and real processes.

Lifecycle (create, exec, stop, start, remove), /data durable across a
restart, commands as Popen (pipes, a kill that reaches the whole tree, a wait
that returns when the daemon dies), a dead daemon making the box broken and
the next start recovering it, create interrupted by a signal at each step
leaving nothing behind, and a same-named directory it did not make left alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from isolation import NamespaceDriver
from reference.box_lite import provision
from reference.box_lite.boxes import BoxManager
from reference.box_lite.errors import BoxExists, BoxNotRunning
from tests.box_lite.conftest import box_processes, mentioning

_OK, _WHY = NamespaceDriver(spares=0).available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}")
ROOT = Path(__file__).resolve().parents[2]


def eventually(check: Callable[[], object], limit: float = 15.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return bool(check())


def run(manager: BoxManager, name: str, script: str, stdin: bytes | None = None) -> tuple[int, str]:
    command = manager.popen(
        name, ["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = command.communicate(stdin, timeout=30)
    return command.returncode, out.decode(errors="replace")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def registry(home: Path) -> dict:
    path = home / "config" / "registry.json"
    return json.loads(path.read_text())["boxes"] if path.exists() else {}


def test_create_exec_stop_start_remove(manager: BoxManager, box_home: Path) -> None:
    steps: list[str] = []
    info = manager.create("alpha", progress=steps.append)
    tools = ["tools"] if manager.machine() is not None else []  # a box with a machine is provisioned last
    assert steps == ["directory", "provisioned", "registered", "launched", "started", *tools]
    assert (info.name, info.state, info.network) == ("alpha", "running", True)
    assert set(registry(box_home)) == {"alpha"}
    assert manager.exec("alpha", ["true"]) == 0
    assert manager.exec("alpha", ["sh", "-c", "exit 7"]) == 7
    code, out = run(manager, "alpha", "echo $USER $HOME $PWD $(hostname) $(id -u)")
    uid = "1000" if tools else "0"  # the box's agent, or its root in a box without a machine
    assert (code, out.split()) == (0, ["agent", "/home/agent", "/home/agent/workspace", "alpha", uid])

    assert mentioning(box_home), "the daemon names its box's directory"
    manager.stop("alpha")
    assert manager.state("alpha") == "stopped"
    assert manager.daemon_pid("alpha") is None
    # Nothing of the box is left the moment stop returns: not the daemon, nor its forks (the set-up chain).
    assert mentioning(box_home) == {} and box_processes(box_home) == {}
    with pytest.raises(BoxNotRunning, match="hermes-box start alpha"):
        manager.popen("alpha", ["true"])
    manager.start("alpha")
    assert manager.state("alpha") == "running"
    assert manager.exec("alpha", ["true"]) == 0

    manager.remove("alpha")
    assert manager.state("alpha") is None
    assert not (box_home / "data" / "boxes" / "alpha").exists()
    assert not (box_home / "run" / "alpha").exists()
    assert registry(box_home) == {}
    assert manager.boxes() == []


def test_data_is_durable_and_tmp_is_emptied_across_stop_and_start(manager: BoxManager) -> None:
    manager.create("keep")
    code, _ = run(manager, "keep", "echo precious > ~/workspace/f && echo raw > /data/g && echo scratch > /tmp/t")
    assert code == 0
    assert (manager.data_dir("keep") / "home" / "workspace" / "f").read_text() == "precious\n"
    manager.stop("keep")
    manager.start("keep")
    code, out = run(manager, "keep", "cat ~/workspace/f /data/g; ls -A /tmp")
    assert (code, out) == (0, "precious\nraw\n")


def test_a_command_is_a_popen_with_pipes(manager: BoxManager) -> None:
    manager.create("pipes")
    command = manager.popen(
        "pipes",
        ["sh", "-c", "read line; echo got $line; echo oops >&2; exit 3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert command.pid > 0 and command.box_pid is not None and command.box_pid > 1
    out, err = command.communicate("hello\n", timeout=30)
    assert (command.returncode, out, err) == (3, "got hello\n", "oops\n")
    assert command.poll() == 3


def test_kill_reaches_the_whole_tree_of_a_command(manager: BoxManager) -> None:
    manager.create("tree")
    command = manager.popen(
        "tree",
        ["bash", "-c", "sleep 300 & (sleep 301 & wait) & setsid -w sleep 302 & echo up; wait"],
        stdout=subprocess.PIPE,
    )
    assert command.stdout is not None
    assert command.stdout.readline() == b"up\n"
    assert eventually(lambda: len([p for p in manager.processes("tree") if p["argv"][:1] == ["sleep"]]) == 3)
    with pytest.raises(subprocess.TimeoutExpired):
        command.wait(0.2)
    command.kill()
    assert command.wait(30) == -signal.SIGKILL
    # every sleep is gone, the one in a session of its own too (a descendant of the command)
    assert eventually(lambda: [p["argv"] for p in manager.processes("tree") if p["box_pid"] != 1] == [])
    command.stdout.close()


def test_terminate_reaches_a_shell_and_its_children(manager: BoxManager) -> None:
    manager.create("term")
    command = manager.popen("term", ["sh", "-c", "sleep 300 & echo up; wait"], stdout=subprocess.PIPE)
    assert command.stdout is not None and command.stdout.readline() == b"up\n"
    command.terminate()
    assert command.wait(30) == -signal.SIGTERM
    assert eventually(lambda: not [p for p in manager.processes("term") if p["argv"][:1] == ["sleep"]])
    command.stdout.close()


def test_a_dead_daemon_ends_the_box_breaks_it_and_the_next_start_recovers(manager: BoxManager) -> None:
    manager.create("fragile")
    assert run(manager, "fragile", "echo kept > /data/kept")[0] == 0
    command = manager.popen("fragile", ["sleep", "300"])
    sleeper = command.pid
    daemon = manager.daemon_pid("fragile")
    assert daemon is not None and alive(sleeper)
    os.kill(daemon, signal.SIGKILL)
    assert command.wait(30) == -signal.SIGKILL  # no hang: the exit arrives as the end of the connection
    assert eventually(lambda: not alive(sleeper))  # the engine ended the box's processes with the daemon
    assert manager.state("fragile") == "broken"
    manager.start("fragile")
    assert manager.state("fragile") == "running"
    assert run(manager, "fragile", "cat /data/kept") == (0, "kept\n")


def test_stop_of_a_broken_box_makes_it_stopped(manager: BoxManager) -> None:
    manager.create("halt")
    daemon = manager.daemon_pid("halt")
    assert daemon is not None
    os.kill(daemon, signal.SIGKILL)
    assert eventually(lambda: manager.daemon_pid("halt") is None)
    assert manager.state("halt") == "broken"
    manager.stop("halt")
    assert manager.state("halt") == "stopped"


def test_quiesce_stops_every_process_of_the_box_and_continues_them(manager: BoxManager) -> None:
    manager.create("calm")
    command = manager.popen("calm", ["sleep", "300"])

    def state() -> str:
        return Path(f"/proc/{command.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    with manager.quiesce("calm"):
        assert eventually(lambda: state() == "T")
    assert eventually(lambda: state() == "S")
    command.kill()
    command.wait(30)


def test_no_network_box_and_the_setting(manager: BoxManager, box_home: Path) -> None:
    info = manager.create("quiet", network=False)
    assert info.network is False
    assert json.loads((box_home / "data" / "boxes" / "quiet" / "box.json").read_text())["network"] is False
    code, out = run(manager, "quiet", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert (code, out.split()) == (0, ["lo"])


def test_refresh_assets_keeps_data_and_the_users_own_profile_lines(manager: BoxManager, box_home: Path) -> None:
    manager.create("fix")
    script = (
        "printf 'export MINE=1\\n' >> ~/.bashrc; "
        "sed -i 's/^PS1=.*/PS1=broken/' ~/.bashrc; echo data > /data/d; rm -rf ~/workspace"
    )
    assert run(manager, "fix", script)[0] == 0
    (box_home / "config" / "registry.json").unlink()  # the registry is lost: repair registers the box again
    assert manager.state("fix") == "broken"
    manager.refresh_assets("fix")
    assert manager.state("fix") == "running"
    script = "cat /data/d; grep -c '^export MINE=1$' ~/.bashrc; grep '^PS1=' ~/.bashrc; ls -d ~/workspace"
    code, out = run(manager, "fix", script)
    assert (code, out.splitlines()) == (0, ["data", "1", "PS1='[box fix] \\w\\$ '", "/home/agent/workspace"])


def test_refresh_assets_follows_no_link_the_box_planted(manager: BoxManager, tmp_path: Path) -> None:
    target = tmp_path / "host-file"
    target.write_text("host content\n")
    os.chmod(target, 0o666)
    manager.create("sly")
    # From inside, .profile becomes a link to a host path (meaningless inside, dangerous if followed outside).
    assert run(manager, "sly", f"rm ~/.profile && ln -s {target} ~/.profile")[0] == 0
    manager.refresh_assets("sly")
    assert target.read_text() == "host content\n"
    profile = manager.data_dir("sly") / "home" / ".profile"
    assert not profile.is_symlink() and provision.BEGIN in profile.read_text()


def test_create_refuses_a_same_named_directory_and_leaves_it(manager: BoxManager, box_home: Path) -> None:
    existing = box_home / "data" / "boxes" / "mine"
    existing.mkdir(parents=True)
    (existing / "precious").write_text("not a box\n")
    with pytest.raises(BoxExists, match="did not make it"):
        manager.create("mine")
    assert (existing / "precious").read_text() == "not a box\n"
    assert sorted(os.listdir(existing)) == ["precious"]
    assert registry(box_home) == {}


def test_create_refuses_a_registered_name(manager: BoxManager) -> None:
    manager.create("twice")
    with pytest.raises(BoxExists, match="already exists"):
        manager.create("twice")
    assert manager.state("twice") == "running"


def test_a_failing_populate_leaves_nothing(manager: BoxManager, box_home: Path) -> None:
    def populate(data: Path) -> None:
        (data / "half").write_text("restored half\n")
        raise RuntimeError("the archive ended early")

    with pytest.raises(RuntimeError, match="ended early"):
        manager.create("half", populate=populate)
    assert manager.state("half") is None
    assert not (box_home / "data" / "boxes" / "half").exists()
    assert registry(box_home) == {}


def test_populated_files_belong_to_the_box(manager: BoxManager) -> None:
    def populate(data: Path) -> None:
        (data / "home" / "workspace").mkdir(parents=True)
        (data / "home" / "workspace" / "restored").write_text("from an archive\n")

    manager.create("loaded", populate=populate)
    script = "cat ~/workspace/restored && echo more >> ~/workspace/restored && stat -c %u ~/workspace/restored"
    code, out = run(manager, "loaded", script)
    owner = "1000" if manager.machine() is not None else "0"  # the box's agent, or its root
    assert (code, out.splitlines()) == (0, ["from an archive", owner])


CREATE_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from reference.box_lite.boxes import BoxManager
    from reference.box_lite.errors import BoxError
    from reference.box_lite.paths import BoxHome

    home, name, point, marker = sys.argv[1:5]

    def hold(step):
        if step == point:
            Path(marker).write_text(step)
            time.sleep(120)

    def populate(data):
        (data / "restored").write_text("x")
        hold("populating")

    try:
        BoxManager(BoxHome.at(home)).create(name, populate=populate, progress=hold)
    except BoxError as exc:
        print(exc, file=sys.stderr)
        sys.exit(exc.exit_code)
    """
)


@pytest.mark.parametrize(
    ("point", "signum"),
    [
        ("directory", signal.SIGINT),
        ("populating", signal.SIGTERM),
        ("provisioned", signal.SIGHUP),
        ("registered", signal.SIGTERM),
        ("launched", signal.SIGINT),
        ("started", signal.SIGTERM),
    ],
)
def test_a_signal_during_create_leaves_no_box(box_home: Path, tmp_path: Path, point: str, signum: int) -> None:
    marker = tmp_path / "reached"
    proc = subprocess.Popen(
        [sys.executable, "-c", CREATE_SCRIPT, str(box_home), "victim", point, str(marker)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert eventually(marker.exists, 60), f"create never reached {point}"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err
    assert "interrupted by" in err
    assert not (box_home / "data" / "boxes" / "victim").exists()
    assert registry(box_home) == {}
    assert box_processes(box_home) == {} and mentioning(box_home) == {}
    run_dir = box_home / "run" / "victim"
    leftovers = sorted(os.listdir(run_dir)) if run_dir.exists() else []
    assert set(leftovers) <= {"lock", "daemon.log"}, leftovers


def test_a_signal_during_create_preserves_a_directory_made_meanwhile(box_home: Path, tmp_path: Path) -> None:
    """A directory that appears under the box's name after create made its own is not create's to delete."""
    marker = tmp_path / "reached"
    proc = subprocess.Popen(
        [sys.executable, "-c", CREATE_SCRIPT, str(box_home), "swapped", "provisioned", str(marker)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert eventually(marker.exists, 60)
        box_dir = box_home / "data" / "boxes" / "swapped"
        os.rename(box_dir, tmp_path / "moved-away")
        box_dir.mkdir()
        (box_dir / "someone-else").write_text("keep me\n")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert (box_home / "data" / "boxes" / "swapped" / "someone-else").read_text() == "keep me\n"
    assert "left in place" in err
    assert registry(box_home) == {}

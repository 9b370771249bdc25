"""Boxes of the fake world are isolated from this machine and from each other.

Every check runs real commands in real boxes (own user, mount, PID, IPC and
UTS namespaces) and looks from inside, then confirms on the host.  On a
machine where namespaces are unusable the module is skipped, naming why.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes import box_paths
from fakes.world import World
from isolation import SYSTEM_DIRS

_PROBE = World(namespaces=None)
_PROBE.close()
pytestmark = pytest.mark.skipif(not _PROBE.isolated, reason=f"no usable namespaces here: {_PROBE.paths_note}")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "world", namespaces=True)
    yield w
    w.close()


def run(world: World, box, cmd: str, **kw) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    proc = world.spawn(box, cmd=cmd, login=False, **kw)
    out, err = proc.popen.communicate(timeout=20)
    return proc.wait(5), out.decode(errors="replace"), err.decode(errors="replace")


def eventually(check, limit: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


def host_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_proc_shows_only_the_boxs_own_processes(world: World) -> None:
    a, b = world.create(name="a"), world.create(name="b")
    other = world.spawn(b, cmd="sleep 30", login=False)
    code, out, _ = run(world, a, "for p in /proc/[0-9]*; do echo ${p#/proc/} $(cat $p/comm); done")
    assert code == 0
    seen = dict(line.split(maxsplit=1) for line in out.splitlines())
    assert seen.get("1") == "box-init", seen
    assert set(seen.values()) <= {"box-init", "bash", "cat"}, f"processes of another box or of the host: {seen}"
    assert "sleep" not in seen.values()
    other.terminate(0.1)


def test_no_environment_of_the_kit_or_of_another_box_is_readable(world: World, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    canary = "kit-canary-" + secrets.token_hex(12)
    monkeypatch.setenv("KIT_ISOLATION_CANARY", canary)
    a, b = world.create(name="a"), world.create(name="b")
    neighbour_secret = "neighbour-" + secrets.token_hex(12)
    neighbour = world.spawn(b, cmd="sleep 30", login=False, env={"NEIGHBOUR_SECRET": neighbour_secret})
    try:
        code, out, _ = run(
            world,
            a,
            "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; "
            "cat /proc/1/environ >/dev/null 2>&1 && echo INIT-READABLE; true",
        )
        assert code == 0
        assert canary not in out and "KIT_ISOLATION_CANARY" not in out
        assert neighbour_secret not in out
        assert "INIT-READABLE" not in out, "a box command may read its init's environment"
        assert "HOME=" + world.layout.home in out, "the box's own environment is what a box command sees"
    finally:
        neighbour.terminate(0.1)


@pytest.mark.parametrize("where", ["/etc", "/usr", "/opt", "/usr/local/bin", "/"])
def test_system_directories_are_read_only(world: World, where: str) -> None:
    box = world.create()
    name = f"kit-isolation-{secrets.token_hex(6)}"
    target = Path(where) / name
    try:
        code, _, err = run(world, box, f"touch {target} || mkdir {target}")
        assert code != 0 and ("Read-only" in err or "Permission denied" in err), err
        assert not target.exists()
    finally:
        if target.is_dir():
            target.rmdir()
        elif target.exists():
            target.unlink()


def test_remounting_read_write_is_refused_and_changes_nothing(world: World) -> None:
    box = world.create()
    name = f"kit-isolation-{secrets.token_hex(6)}"
    try:
        _, out, _ = run(
            world,
            box,
            f"mount -o remount,rw /usr; mount -o remount,rw,bind /etc; "
            f"umount -l /usr; touch /usr/{name} /etc/{name} && echo WROTE; true",
        )
        assert "WROTE" not in out
        assert not Path("/usr", name).exists() and not Path("/etc", name).exists()
    finally:
        for p in (Path("/usr", name), Path("/etc", name)):
            if p.exists():
                p.unlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="the host-uid remap only applies when the kit runs as root")
def test_a_root_owned_host_file_in_the_box_cannot_be_changed(world: World) -> None:
    box = world.create()
    guarded = box.workspace_dir / "root-owned"
    guarded.write_text("original\n")
    os.chown(guarded, 0, 0)
    os.chmod(guarded, 0o644)
    _, out, _ = run(
        world,
        box,
        f"cd {world.layout.workspace}; echo changed >> root-owned; "
        "chmod 666 root-owned; echo changed > root-owned; stat -c %U root-owned",
    )
    assert guarded.read_text() == "original\n"
    assert guarded.stat().st_mode & 0o777 == 0o644
    assert out.split()[-1] == "nobody", "host root must not be root inside the box"
    assert (world.box_uid, world.box_gid) != (0, 0)


def test_box_files_belong_to_the_box_owner_on_the_host(world: World) -> None:
    box = world.create()
    assert run(world, box, "echo hi > ~/made && id -u")[1].strip() == "0"
    made = box.home_dir / "made"
    assert (made.stat().st_uid, made.stat().st_gid) == (world.box_uid, world.box_gid)
    for sub in (box.home_dir, box.workspace_dir, box.tmp_dir):
        assert sub.stat().st_uid == world.box_uid


def test_another_boxs_files_are_out_of_reach(world: World) -> None:
    a, b = world.create(name="a"), world.create(name="b")
    assert run(world, b, "echo private > ~/secret; echo tmp > /tmp/secret")[0] == 0
    for path in (b.home_dir / "secret", b.dir, world.root, b.tmp_dir / "secret"):
        _, out, _ = run(world, a, f"cat {path} 2>&1 || ls {path} 2>&1; echo x > {path}/planted 2>&1; true")
        assert "private" not in out and "tmp\n" not in out
        assert not Path(f"{path}/planted").exists()
    _, out, _ = run(world, a, "cat ~/secret /tmp/secret 2>&1; true")
    assert "private" not in out and "tmp\n" not in out
    # The root holds the system directories, the box's own places and nothing else of this machine.
    expected = {Path(d).name for d in SYSTEM_DIRS if os.path.lexists(d)} | {"proc", "dev", "tmp", "run", "var"}
    expected |= {p.strip("/").split("/")[0] for p in (world.layout.home, world.layout.workspace)}
    assert set(run(world, a, "ls -A /")[1].split()) == expected


def test_host_processes_cannot_be_signalled(world: World) -> None:
    a, b = world.create(name="a"), world.create(name="b")
    outsider = subprocess.Popen(["sleep", "30"], start_new_session=True)
    neighbour = world.spawn(b, cmd="sleep 30", login=False)
    try:
        for pid in (outsider.pid, neighbour.pid, os.getpid()):
            code, _, _ = run(world, a, f"kill -9 {pid}")
            assert code != 0, f"kill -9 {pid} succeeded in a box"
        # The box's own init (with the signals a Python process would handle), then all the box may signal.
        run(world, a, "kill -INT 1; kill -TERM 1; kill -HUP 1; kill -9 1; kill -9 -1")
        time.sleep(0.2)
        assert outsider.poll() is None and neighbour.popen.poll() is None
        assert run(world, a, "echo still")[1] == "still\n", "a box command killed its box's init"
    finally:
        outsider.kill()
        outsider.wait()
        neighbour.terminate(0.1)


def test_the_hostname_is_the_boxs_name_or_id(world: World) -> None:
    named, anonymous = world.create(name="my-box"), world.create()
    assert run(world, named, "hostname")[1].strip() == "my-box"
    assert run(world, anonymous, "hostname")[1].strip() == anonymous.id
    assert run(world, named, "hostname other 2>/dev/null; hostname")[1].strip() == "my-box"


def test_ipc_objects_are_the_boxs_own(world: World) -> None:
    a, b = world.create(name="a"), world.create(name="b")
    if run(world, a, "command -v ipcmk")[0] != 0:
        pytest.skip("no ipcmk (util-linux) on this machine")
    assert run(world, a, "ipcmk -Q >/dev/null && ipcs -q | grep -c '^0x'")[1].strip() == "1"
    assert run(world, b, "ipcs -q | grep -c '^0x'; true")[1].strip() == "0"


def test_pause_resume_and_delete_reach_every_process_of_the_box(world: World) -> None:
    box = world.create()
    job = world.spawn(box, cmd="nohup sleep 30 >/dev/null 2>&1 & sleep 30", login=False)
    assert eventually(lambda: len(world.box_processes(box)) >= 4)  # init, bash, two sleeps
    members = [p for p in world.box_processes(box) if p != box.running.init_pid]  # type: ignore[union-attr]
    world.pause(box)
    assert eventually(lambda: all(host_state(p) == "T" for p in members)), [host_state(p) for p in members]
    world.resume(box)
    assert eventually(lambda: all(host_state(p) in ("S", "R") for p in members))
    running = box.running
    world.delete(box)
    assert job.wait(5) == 137
    assert all(host_state(p) in (None, "Z") for p in members)
    assert running is not None and world.driver.processes(running) == []
    assert not box.dir.exists()


def test_a_detached_job_outlives_its_command_and_dies_with_the_box(world: World) -> None:
    box = world.create()
    code, out, _ = run(world, box, "nohup sleep 30 >/dev/null 2>&1 & echo $!")
    assert code == 0
    job = world.host_pid(box, int(out))
    assert job is not None and host_state(job) in ("S", "R")
    assert run(world, box, f"kill -0 {int(out)} && echo alive")[1] == "alive\n"
    world.delete(box)
    assert eventually(lambda: host_state(job) in (None, "Z"))


def test_orphans_are_reaped_by_the_boxs_init(world: World) -> None:
    box = world.create()
    assert run(world, box, "for i in 1 2 3; do (sleep 0.1 &); done")[0] == 0  # three orphans, soon ended
    time.sleep(0.5)
    code, out, _ = run(world, box, "cat /proc/[0-9]*/stat | awk '{print $3}' | sort | uniq -c")
    assert code == 0 and " Z" not in out, f"zombies in the box: {out}"


def test_a_pty_command_has_a_controlling_terminal_of_the_box(world: World) -> None:
    box = world.create()
    proc = world.spawn(box, cmd="tty; test -t 0 && echo TTY; stty size; ps -o tty= -p $$", tty=True, rows=33, cols=101)
    data = b""
    while True:
        try:
            chunk = os.read(proc.pty_master, 4096)  # type: ignore[arg-type]
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    assert proc.wait(5) == 0
    lines = data.decode().split()
    assert lines[0].startswith("/dev/pts/") and "TTY" in lines and lines[2:4] == ["33", "101"], lines
    assert lines[4].startswith("pts/"), "the terminal is the command's controlling terminal"
    os.close(proc.pty_master)  # type: ignore[arg-type]


def test_exit_codes_cwd_and_missing_programs(world: World) -> None:
    box = world.create()
    assert run(world, box, "exit 7")[0] == 7
    assert run(world, box, "kill -TERM $$")[0] == 143
    assert run(world, box, "kill -9 $$")[0] == 137
    with pytest.raises(box_paths.NotInBox, match="no such directory in the box"):
        world.spawn(box, cmd="pwd", cwd="/no/such/dir")  # never started in / instead
    assert run(world, box, "pwd", cwd=world.layout.workspace)[1] == world.layout.workspace + "\n"
    proc = world.spawn(box, argv=["/no/such/program"])
    _, err = proc.popen.communicate(timeout=10)
    assert proc.wait(5) == 127 and b"No such file" in err
    proc = world.spawn(box, argv=["cat"])
    out, _ = proc.popen.communicate(b"through stdin", timeout=10)
    assert (proc.wait(5), out) == (0, b"through stdin")
    proc = world.spawn(box, cmd="sleep 5", login=False)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.popen.wait(0.1)
    proc.signal(signal.SIGKILL)
    assert proc.wait(5) == 137


def test_a_group_kill_from_the_host_reaches_the_whole_tree(world: World) -> None:
    box = world.create()
    proc = world.spawn(box, cmd="sleep 30 & sleep 30 & echo $!; wait", login=False)
    child = world.host_pid(box, int(proc.popen.stdout.readline()))  # type: ignore[union-attr]
    assert child is not None and os.getpgid(child) == proc.pid
    proc.signal(signal.SIGKILL)
    assert proc.wait(5) == 137
    assert eventually(lambda: host_state(child) in (None, "Z"))


def test_nothing_is_left_after_close(tmp_path: Path) -> None:
    world = World(tmp_path / "world", namespaces=True)
    boxes = [world.create(name=f"b{i}") for i in range(3)]
    for box in boxes:
        world.spawn(box, cmd="nohup sleep 30 >/dev/null 2>&1 & sleep 30", login=False)
    assert eventually(lambda: all(len(world.box_processes(b)) >= 3 for b in boxes))
    running = [b.running for b in boxes]
    pids = [p for b in boxes for p in world.box_processes(b)]
    world.close()
    assert all(r is not None and world.driver.processes(r) == [] for r in running)
    assert all(host_state(p) in (None, "Z") for p in pids)
    assert not world.root.exists()


def test_unisolated_worlds_say_so(tmp_path: Path) -> None:
    world = World(tmp_path / "plain", namespaces=False)
    try:
        assert not world.isolated and not world.namespaced
        assert world.paths_note.startswith("host paths") and "not isolated" in world.paths_note
        assert (world.box_uid, world.box_gid) == (os.geteuid(), os.getegid())
        box = world.create()
        assert run(world, box, "pwd")[1].strip() == str(box.home_dir)
    finally:
        world.close()
    isolated = World(tmp_path / "isolated", namespaces=True)
    try:
        assert isolated.isolated and isolated.paths_note.startswith("vendor paths")
        assert "isolated boxes" in isolated.paths_note
    finally:
        isolated.close()

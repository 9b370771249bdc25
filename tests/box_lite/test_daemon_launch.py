"""How a box's daemon is launched: an isolated interpreter without site processing that finds the
project's code through the path it is given, whether the project is installed editable (this tree)
or as plain packages in a site directory; and how the manager waits for a stopped daemon to exit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import isolation
import reference
from reference.box_lite import boxes
from reference.box_lite.boxes import BoxManager
from tests.box_lite.conftest import box_processes

# What a BoxManager imports of this project (reference's other backends are not needed).
PACKAGES = ("archives", "isolation", "reference/common", "reference/box_lite")


def _cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _environ(pid: int) -> dict[str, str]:
    pairs = (e.decode().partition("=") for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e)
    return {k: v for k, _, v in pairs}


def _daemon_pid(box_home: Path, name: str) -> int:
    return box_processes(box_home)[f"daemon of {name}"]


def test_the_daemon_runs_isolated_without_site_and_without_python_variables(
    manager: BoxManager, box_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/nonexistent-python-path")
    monkeypatch.setenv("PYTHONSTARTUP", "/nonexistent-startup.py")
    manager.create("iso")
    argv = _cmdline(_daemon_pid(box_home, "iso"))
    flags = boxes._bytecode_flags()
    assert argv[: 4 + len(flags)] == [sys.executable, "-I", "-S", *flags, "-c"]
    assert boxes.DAEMON_MODULE in argv[4 + len(flags)]  # how the manager and the tests recognise a daemon
    assert argv[-1] == "iso"
    assert not [k for k in _environ(_daemon_pid(box_home, "iso")) if k.startswith("PYTHON")]
    assert manager.exec("iso", ["sh", "-c", "test -d /data"]) == 0
    manager.stop("iso")
    manager.start("iso")
    assert _cmdline(_daemon_pid(box_home, "iso"))[1:3] == ["-I", "-S"]
    manager.remove("iso")
    assert box_processes(box_home) == {}


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_the_boxs_setup_is_forked_from_its_daemon(manager: BoxManager, box_home: Path) -> None:
    """No second interpreter per box: the init descends from the daemon through forks of it (its command
    line is the daemon's), holds none of the daemon's files (daemon.pid's lock stays the daemon's alone)."""
    manager.create("forked")
    try:
        found = box_processes(box_home)
        daemon, init = found["daemon of forked"], found["init of forked"]
        chain, pid = [], init
        while pid not in (daemon, 1):
            pid = _parent(pid)
            chain.append(pid)
        assert pid == daemon, f"the box's init {init} does not descend from its daemon {daemon}: {chain}"
        assert not any("box_init.py" in " ".join(_cmdline(p)) for p in [init, *chain[:-1]]), chain
        held = [
            link
            for p in [init, *chain[:-1]]
            for link in (Path(f"/proc/{p}/fd") / fd for fd in Path(f"/proc/{p}/fd").iterdir())
            if str(link.readlink()).endswith("daemon.pid")
        ]
        assert not held, f"a box process holds daemon.pid: {held}"
        assert manager.exec("forked", ["true"]) == 0
    finally:
        manager.remove("forked")


def test_the_daemon_follows_this_processs_bytecode_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """-I makes the daemon ignore PYTHON* variables: the manager passes its own bytecode settings as flags."""
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    assert boxes._daemon_command()[3:5] == ["-X", f"pycache_prefix={tmp_path}"]
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert boxes._daemon_command()[3] == "-B"
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert boxes._daemon_command()[3] == "-c"


def test_the_daemon_imports_only_the_standard_library_and_the_project() -> None:
    """The daemon's own imports, in the interpreter the manager launches it in (no site: a third-party
    import would fail there, and this lists any module that is neither standard nor the project's)."""
    probe = textwrap.dedent(
        f"""
        import json, sys
        sys.path.extend({boxes._code_roots()!r})
        import {boxes.DAEMON_MODULE}
        top = sorted({{m.split(".")[0] for m in sys.modules}})
        print(json.dumps([m for m in top if m not in sys.stdlib_module_names and m != "__main__"]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {"isolation", "reference"}


def test_the_code_roots_are_where_the_imported_packages_live() -> None:
    roots = boxes._code_roots()
    assert len(roots) == len(set(roots))
    for module in (reference, isolation):
        assert module.__file__ is not None
        assert str(Path(module.__file__).parent.parent) in roots


def test_a_box_starts_from_a_plain_install_in_a_site_directory(tmp_path: Path, box_home: Path) -> None:
    """The project's packages copied into a directory first on sys.path (as pip puts them in
    site-packages): the daemon is given that directory and runs the copied code."""
    site = tmp_path / "site-packages"
    site.mkdir()
    source = Path(reference.__file__ or "").parent.parent
    for package in PACKAGES:
        shutil.copytree(source / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(source / "reference" / "__init__.py", site / "reference" / "__init__.py")
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(site)!r})
        from reference.box_lite import boxes
        from reference.box_lite.boxes import BoxManager
        from reference.box_lite.paths import BoxHome
        manager = BoxManager(BoxHome.at({str(box_home)!r}))
        manager.create("copied")
        pid = int((manager.home.run("copied").daemon_pid).read_text().split()[0])
        code = manager.exec("copied", ["true"])
        cmdline = open(f"/proc/{{pid}}/cmdline", "rb").read().decode()
        manager.remove("copied")
        print(json.dumps({{"roots": boxes._code_roots(), "module": boxes.__file__, "cmdline": cmdline, "code": code}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["module"].startswith(str(site))
    assert seen["roots"] == [str(site)]
    argv = seen["cmdline"].split("\0")
    assert f"sys.path.extend({[str(site)]!r})" in argv[argv.index("-c") + 1]
    assert seen["code"] == 0


def test_waiting_for_a_daemon_to_let_go_ends_when_the_holder_exits(tmp_path: Path) -> None:
    """``_wait_free`` returns once the process named in the pid file and holding its flock exits, and
    reports a holder that stays past the timeout."""
    pid_file = tmp_path / "daemon.pid"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX);"
            " os.write(fd, f'{os.getpid()}\\n'.encode()); print('held', flush=True); sys.stdin.read()",
            str(pid_file),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        assert boxes._wait_free(pid_file, 0.1) is False
        threading.Timer(0.2, lambda: holder.stdin.close() if holder.stdin else None).start()
        assert boxes._wait_free(pid_file, 30.0) is True
        assert holder.wait(10) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_waiting_for_a_lock_whose_pid_file_names_no_process_still_ends(tmp_path: Path) -> None:
    """A holder whose pid file does not name it (not yet written, or a recycled pid) is still waited for."""
    pid_file = tmp_path / "daemon.pid"
    pid_file.write_text("not a pid\n")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX);"
            " print('held', flush=True); sys.stdin.read()",
            str(pid_file),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        assert boxes._wait_free(pid_file, 0.1) is False
        assert holder.stdin is not None
        holder.stdin.close()
        assert boxes._wait_free(pid_file, 30.0) is True
        assert holder.wait(10) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()

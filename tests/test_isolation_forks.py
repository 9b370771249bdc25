"""The isolation engine's fork server: setup processes forked from a clean interpreter.

A driver that keeps spares forks each box's setup process from one server
(box_init.py --forks) instead of starting an interpreter per box.  These
tests start real boxes and look at the real processes: the server makes the
setup processes, a box made so is as isolated as one made by a new
interpreter, a dead server is replaced, and closing the driver ends it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from isolation import Bind, BoxPopen, BoxSpec, NamespaceDriver
from isolation.namespaces import ForkedSetup

_OK, _WHY = NamespaceDriver(spares=0).available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}")


@pytest.fixture
def driver() -> Iterator[NamespaceDriver]:
    d = NamespaceDriver(spares=1)
    yield d
    d.close()


def _box(driver: NamespaceDriver, tmp_path: Path, name: str):  # type: ignore[no-untyped-def]
    home = tmp_path / name
    home.mkdir()
    os.chown(home, driver.box_uid, driver.box_gid)
    return driver.start(BoxSpec(name, (Bind(home, "/home/x"),)))


def _run(box, argv: list[str]) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    import subprocess

    proc = BoxPopen(argv, launch=box.launch, env={"PATH": "/usr/bin:/bin"}, cwd="/home/x", stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=20)
    return proc.returncode, out.decode()


def _server_pid(driver: NamespaceDriver) -> int:
    server = driver._forks._server  # type: ignore[union-attr]
    assert server is not None, "no fork server is running"
    return server.pid


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_setup_processes_are_forked_by_the_server(driver: NamespaceDriver, tmp_path: Path) -> None:
    box = _box(driver, tmp_path, "a")
    try:
        assert isinstance(box._setup, ForkedSetup)
        assert _parent(box._setup.pid) == _server_pid(driver), "the setup process is not the fork server's child"
        code, out = _run(box, ["sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; env"])
        assert code == 0
        lines = out.splitlines()
        assert "box_init" in lines[0], out
        # Nothing of this process's environment: only what the command was given and sh adds.
        assert {line.split("=", 1)[0] for line in lines[1:]} <= {"PATH", "PWD", "SHLVL", "_"}, out
    finally:
        driver.stop(box)


def test_a_dead_fork_server_is_replaced(driver: NamespaceDriver, tmp_path: Path) -> None:
    driver.stop(_box(driver, tmp_path, "a"))
    first = _server_pid(driver)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while driver._forks._server.poll() is None and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.01)
    boxes = [_box(driver, tmp_path, f"b{i}") for i in range(3)]  # a spare forked before the kill may serve one
    try:
        for box in boxes:
            assert _run(box, ["true"])[0] == 0
        assert _server_pid(driver) != first
    finally:
        for box in boxes:
            driver.stop(box)


def test_closing_the_driver_ends_the_fork_server(tmp_path: Path) -> None:
    driver = NamespaceDriver(spares=1)
    driver.stop(_box(driver, tmp_path, "a"))
    server = driver._forks._server  # type: ignore[union-attr]
    assert server is not None
    driver.close()
    assert server.poll() is not None, "the fork server outlived its driver"


def _ended(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("made_by", ["the fork server", "this process", "a new interpreter"])
def test_once_a_box_is_killed_its_setup_process_has_ended(tmp_path: Path, made_by: str) -> None:
    """The set-up chain (setup process, namespace process) exits right after the init; kill waits for it,
    so a process that ends once its box is killed (Box Lite's daemon) leaves none of it behind."""
    if made_by == "the fork server":
        driver = NamespaceDriver(spares=1)
    else:
        driver = NamespaceDriver(spares=0, fork_self=made_by == "this process")
    try:
        box = _box(driver, tmp_path, "k")
        setup = box._setup
        assert setup is not None and not _ended(setup.pid)
        box.kill(10)
        assert _ended(setup.pid), f"the setup process made by {made_by} outlived its box's kill"
    finally:
        driver.close()

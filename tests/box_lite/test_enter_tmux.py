"""``hermes-box enter`` in a real terminal: a tmux server of the test's own drives it.

The outer tmux (its socket under the test's tmp dir, no user config) runs
``hermes-box enter alpha`` in a pane; keys typed with send-keys reach the box's
own tmux session, and capture-pane shows what the box printed.  The outer
server is killed at the end; the box (and the tmux server inside it) is
stopped by the ``box_home`` fixture.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from isolation import NamespaceDriver

_OK, _WHY = NamespaceDriver(spares=0).available()
pytestmark = [
    pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (nox -s tests installs it)"),
]
ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


class Tmux:
    """A tmux server on its own socket."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=check,
        )

    def capture(self, target: str) -> str:
        return self.run("capture-pane", "-p", "-J", "-t", target).stdout

    def wait_for(self, target: str, found: Callable[[str], bool]) -> str:
        """The pane's text once ``found`` accepts it (polled); fails with the last text otherwise."""
        end = time.monotonic() + WAIT_S
        text = ""
        while time.monotonic() < end:
            text = self.capture(target)
            if found(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"never appeared in pane {target}:\n{text}")


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (by parent pid, from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found.add(child)
                frontier.append(child)
    return found


def running(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                alive.add(pid)
        except (OSError, IndexError):
            continue
    return alive


@pytest.fixture
def tmux(tmp_path: Path, box_home: Path) -> Iterator[Tmux]:
    """The test's tmux server; at the end it is killed and its panes' processes (hermes-box enter) have ended.

    It depends on ``box_home`` so that it ends first: the box daemons are stopped after the clients.
    """
    server = Tmux(tmp_path / "tmux.sock")
    try:
        yield server
    finally:
        shown = server.run("display-message", "-p", "#{pid}", check=False).stdout.strip()
        tree = descendants(int(shown)) if shown.isdigit() else set()
        server.run("kill-server", check=False)
        end = time.monotonic() + WAIT_S
        while running(tree) and time.monotonic() < end:
            time.sleep(0.05)
        left = running(tree)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"processes of the tmux server outlived it: {left}"


def hb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reference.box_lite.cli", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def enter_line(home: Path, *extra: str) -> str:
    argv = [sys.executable, "-m", "reference.box_lite.cli", "--home", str(home), "enter", "alpha", *extra]
    # The pane stays after enter returns, showing its exit status.
    return f"{shlex.join(argv)}; echo enter-exit=$?; sleep 600"


def test_enter_attaches_a_persistent_tmux_session_under_workspace(box_home: Path, tmux: Tmux) -> None:
    assert hb(box_home, "new", "alpha", "--no-doctor").returncode == 0
    tmux.run("new-session", "-d", "-s", "outer", "-x", "150", "-y", "40", "-c", str(ROOT), enter_line(box_home))
    tmux.wait_for("outer", lambda text: "[box alpha]" in text)  # the managed prompt names the box
    tmux.run("send-keys", "-t", "outer", "pwd; echo $TMUX | cut -d, -f1; echo mark-$((6*7))", "Enter")
    text = tmux.wait_for("outer", lambda t: "mark-42" in t)
    lines = [line.strip() for line in text.splitlines()]
    assert "/home/agent/workspace" in lines
    uid = 1000 if NamespaceDriver(spares=0, probe=False).root_layers else 0  # the box's agent, or its root
    assert f"/tmp/tmux-{uid}/default" in lines  # inside the box's own tmux server
    assert "sleep 600" not in text

    # Detach (the box's tmux prefix reaches it as typed): enter returns 0, the session lives on.
    tmux.run("send-keys", "-t", "outer", "C-b", "d")
    tmux.wait_for("outer", lambda t: "enter-exit=0" in t)
    listed = hb(box_home, "exec", "alpha", "--", "tmux", "list-sessions", "-F", "#{session_name}")
    assert listed.returncode == 0 and listed.stdout.split() == ["alpha"]
    assert "session alpha is running" in hb(box_home, "doctor", "alpha").stdout

    # Entering again attaches the same session: what it showed before is still there.
    tmux.run("new-window", "-t", "outer", "-n", "again", "-c", str(ROOT), enter_line(box_home))
    tmux.wait_for("outer:again", lambda t: "mark-42" in t)
    tmux.run("send-keys", "-t", "outer:again", "exit", "Enter")  # ends the box's shell, so its session
    tmux.wait_for("outer:again", lambda t: "enter-exit=0" in t)
    gone = hb(box_home, "exec", "alpha", "--", "sh", "-c", "tmux has-session -t alpha 2>/dev/null; echo $?")
    assert gone.stdout.strip() == "1"


def test_enter_without_tmux_opens_a_login_shell_and_says_so(box_home: Path, tmux: Tmux) -> None:
    assert hb(box_home, "new", "alpha", "--no-doctor").returncode == 0
    assert hb(box_home, "stop", "alpha").returncode == 0  # enter starts a stopped box
    tmux.run(
        "new-session", "-d", "-s", "plain", "-x", "150", "-y", "40", "-c", str(ROOT), enter_line(box_home, "--no-tmux")
    )
    text = tmux.wait_for("plain", lambda t: "[box alpha]" in t)
    assert "a plain login shell (--no-tmux); no persistent session" in text
    assert "starting alpha" in text
    tmux.run("send-keys", "-t", "plain", "echo in-$(pwd)-$TMUX-end; exit 3", "Enter")
    text = tmux.wait_for("plain", lambda t: "enter-exit=" in t)
    assert "in-/home/agent/workspace--end" in text  # no tmux inside
    assert "enter-exit=3" in text  # the shell's exit status is enter's

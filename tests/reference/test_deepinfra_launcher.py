"""The DeepInfra launcher and killer, run by real bash on this machine as the sandbox would run them."""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from reference.deepinfra import launcher
from reference.deepinfra.settings import WORKSPACE


@pytest.fixture
def workspace(tmp_path):
    """Stand-ins for the sandbox's /workspace and its run log (the launch's argv is moved onto them)."""
    root = tmp_path / "workspace"
    root.mkdir()
    return root, tmp_path / "runs.log"


def _argv(root: Path, runs: Path, argv: list[str]) -> list[str]:
    """The launch's argv with the sandbox's paths moved under this test's directory."""
    return [a.replace(WORKSPACE, str(root)).replace(launcher.RUNS, str(runs)) for a in argv]


def _run(workspace, cmd: str, *, stdin: bytes | None = None) -> tuple[subprocess.CompletedProcess[bytes], int]:
    """The launched command's outcome, and the pid of the process the exec started."""
    root, runs = workspace
    made = launcher.launch(cmd, login=False, stdin=stdin)
    proc = subprocess.Popen(
        _argv(root, runs, made.argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def _alive_in_group(group: int) -> list[int]:
    """Processes of ``group`` that still run (a killed child waiting to be reaped does not), after a moment."""
    time.sleep(0.2)
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def _kill(workspace, run_id: str, ticks: int = 40) -> int:
    root, runs = workspace
    argv = _argv(root, runs, launcher.killer(run_id, wait_ticks=ticks))
    return subprocess.run(argv, capture_output=True, timeout=30).returncode


def test_the_command_sees_what_bash_c_gives_it_and_runs_in_the_launchers_own_shell(workspace):
    root, _ = workspace
    done, pid = _run(workspace, 'echo "$0|$#|${__r-}${__l-}${__h-}|$HOME|$$"; nosuchcmd; echo "$LINENO"; exit 7')
    first, line = done.stdout.decode().splitlines()
    assert first.split("|") == ["bash", "0", "", str(root), str(pid)], "one bash: the command's shell is the exec's"
    assert done.returncode == 7 and line == "1"
    plain = subprocess.run(["bash", "-c", "nosuchcmd"], capture_output=True)
    assert done.stderr == plain.stderr, "line numbers start at 1, as under bash -c"


def test_stdin_arrives_byte_for_byte(workspace):
    data = bytes(range(256)) * 3 + b"no newline at the end"
    done, _ = _run(workspace, "od -An -tx1 -v | tr -d ' \\n'", stdin=data)
    assert done.returncode == 0 and done.stdout.decode() == data.hex()


def test_the_killer_kills_the_whole_group_even_after_the_command_execs(workspace):
    root, runs = workspace
    for cmd in ("sleep 60 & sleep 60; echo never", "exec sleep 60"):
        made = launcher.launch(cmd, login=False, stdin=None)
        proc = subprocess.Popen(
            _argv(root, runs, made.argv), start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + 10
            while made.run_id not in (runs.read_text() if runs.exists() else ""):
                assert time.monotonic() < deadline, "the launch never recorded itself"
                time.sleep(0.02)
            assert _kill(workspace, made.run_id) == 0
            assert proc.wait(10) == -9
            assert proc.stdout is not None and proc.stdout.read() == b""
            assert _alive_in_group(proc.pid) == [], cmd
        finally:
            proc.kill()
        assert _kill(workspace, made.run_id, ticks=2) == 3, "a run that ended is not killed again"
    assert _kill(workspace, "hr-0000000000000000", ticks=2) == 3, "a run that never started: nothing to kill"


def test_a_record_whose_process_started_at_another_time_is_not_killed(workspace):
    """A pid reused by another process: its start time gives it away, and it lives."""
    _, runs = workspace
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        runs.write_text(f"hr-1111111111111111 {other.pid} {time.time() - 3600:.6f}\n")
        assert _kill(workspace, "hr-1111111111111111", ticks=2) == 3
        assert other.poll() is None, "a process that is not the run's was killed"
        runs.write_text(f"hr-2222222222222222 {other.pid} {time.time():.6f}\n")
        assert _kill(workspace, "hr-2222222222222222", ticks=2) == 0, "the same check passes for the right start time"
        assert other.wait(10) == -9
    finally:
        other.kill()


def test_a_bootstrap_unpacks_the_files_it_carries_and_says_125_when_it_could_not(workspace):
    root, runs = workspace
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        member = tarfile.TarInfo(f"{str(root).lstrip('/')}/.hermes/skills/a.md")
        member.size = 5
        tar.addfile(member, io.BytesIO(b"skill"))
    for files, status in ((buffer.getvalue(), 0), (b"not a tar archive", launcher.LAUNCH_FAILED)):
        made = launcher.launch("echo booted", login=True, stdin=None, files=files)
        done = subprocess.run(_argv(root, runs, made.argv), capture_output=True, start_new_session=True)
        assert (done.returncode, done.stdout) == (status, b"booted\n"), done.stderr
    assert (root / ".hermes" / "skills" / "a.md").read_bytes() == b"skill"
    assert b"could not unpack Hermes's files" in done.stderr
    with pytest.raises(ValueError, match="session bootstrap"):
        launcher.launch("true", login=False, stdin=None, files=b"")

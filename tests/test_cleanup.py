"""The kit cleans up after itself: no process and no file of a run is left behind, even when the
backend under test leaks.

Each run goes through tests/leftovers_probe.py: a child subreaper (every process the run starts stays
its descendant, so the ones still alive afterwards are exactly the run's leftovers) in a private mount
namespace where /tmp is an empty scratch directory and $HOME an overlay whose writes land in a scratch
directory.  The kit sees the user's home and /tmp where they always are (and is not told otherwise:
HOME and TMPDIR keep their values); whatever it leaves there lands in the scratch directories, which
the test lists afterwards, free of other processes' files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conformance import suite_command
from tests.conftest import ROOT

pytestmark = pytest.mark.suite

# Files the interpreter itself writes (bytecode caches) when it is installed under $HOME (pyenv).
_INTERPRETER_DIRS = tuple(
    str(Path(prefix).resolve().relative_to(Path.home().resolve()))
    for prefix in {sys.prefix, sys.base_prefix}
    if Path(prefix).resolve().is_relative_to(Path.home().resolve())
)

# A local backend with no isolation of its own, like Hermes's built-in local backend: commands run on
# this machine with the host process's environment (HOME, TMPDIR), the cwd they are given, and the
# host's temp dir for the session snapshot.
HOST_SHELL_PLUGIN = """
import subprocess
import tempfile

from agent.terminal_env_provider import TerminalEnvironmentProvider
from tools.environments.base import BaseEnvironment


class HostShellEnvironment(BaseEnvironment):
    def __init__(self, *, cwd, timeout):
        super().__init__(cwd=cwd, timeout=timeout)
        self.init_session()

    def get_temp_dir(self):
        return tempfile.gettempdir()

    def _run_bash(self, cmd_string, *, login=False, timeout=120, stdin_data=None):
        proc = subprocess.Popen(["bash", "-c", cmd_string], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                                text=True, start_new_session=True)
        if stdin_data is not None:
            proc.stdin.write(stdin_data)
            proc.stdin.close()
        return proc

    def cleanup(self):
        pass


class HostShellProvider(TerminalEnvironmentProvider):
    name = "host_shell"
    is_remote = False
    is_container = False

    def is_available(self):
        return True

    def create_environment(self, *, cwd, timeout, task_id="default", image=None, container_config=None, **kwargs):
        return HostShellEnvironment(cwd=cwd, timeout=int(timeout or 180))


def register(ctx):
    ctx.register_terminal_environment_provider(HostShellProvider())
"""


def _namespace_prefix() -> list[str]:
    """``unshare`` arguments that give a private mount namespace here, or skip the test."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a private /tmp and $HOME")
    for prefix in (["unshare", "--mount"], ["unshare", "--user", "--map-root-user", "--mount"]):
        if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    pytest.skip("cannot create a mount namespace here (neither as root nor in a user namespace)")


def _below_tmp(paths: list[Path]) -> list[str]:
    """The outermost of ``paths`` that lie below /tmp: what a private /tmp must keep visible."""
    tmp = Path("/tmp").resolve()
    found = sorted({str(p.resolve()) for p in paths if p.resolve().is_relative_to(tmp) and p.resolve() != tmp})
    return [p for p in found if not any(p.startswith(q + "/") for q in found if q != p)]


def _kept(root: Path) -> list[str]:
    """The project and the interpreter running it (a clone under /tmp, its .nox virtualenv, a bytecode cache)."""
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    return _below_tmp([root, Path(sys.prefix), Path(sys.base_prefix), *([Path(prefix)] if prefix else [])])


def _probe(
    tmp_path: Path, *command: str, timeout: float = 900, root: Path = ROOT, env_extra: dict[str, str] | None = None
) -> tuple[dict, Path, Path, str]:
    """Run ``command`` in the private namespace; (probe result, scratch /tmp, scratch home, output)."""
    scratch_tmp, scratch_home = tmp_path / "tmp", tmp_path / "home"
    scratch_tmp.mkdir(exist_ok=True)
    scratch_home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "TEMPDIR_BOX_", "HERMES_")) and k not in ("CI", "TMPDIR")
    }
    env.update(env_extra or {})
    keep = [arg for path in _kept(root) for arg in ("--keep", path)]
    proc = subprocess.run(
        [
            *_namespace_prefix(),
            sys.executable,
            str(root / "tests" / "leftovers_probe.py"),
            "--private-tmp",
            str(scratch_tmp),
            *keep,
            "--private-home",
            str(scratch_home),
            "--",
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env=env,
    )
    output = proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"returncode"')]
    assert lines, f"the probe reported nothing:\n{output[-3000:]}"
    return json.loads(lines[-1]), scratch_tmp, scratch_home, output


def _entries(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def _written_to_home(scratch_home: Path) -> list[str]:
    """What the run wrote into $HOME (the overlay's upper layer), the interpreter's own caches aside."""
    upper = scratch_home / "upper"
    found = []
    for path in sorted(_entries(upper)):
        if "__pycache__" in Path(path).parts and path.startswith(_INTERPRETER_DIRS):
            continue
        if any(path == d or d.startswith(path + "/") for d in _INTERPRETER_DIRS):
            continue  # a directory on the way to an interpreter cache
        if (upper / path).is_dir() and any(p.startswith(path + "/") for p in found):
            continue
        found.append(path)
    return found


def _nothing_left(result: dict, scratch_tmp: Path, scratch_home: Path, output: str, *, keep: set[str]) -> None:
    assert result["left"] == [], f"processes of the run still running: {result['left']}\n{output[-2000:]}"
    keep = keep | {Path(p).relative_to(Path("/tmp").resolve()).parts[0] for p in _kept(ROOT)}
    left_in_tmp = {name for name in os.listdir(scratch_tmp) if name not in keep}
    assert not left_in_tmp, f"the run left in /tmp: {sorted(_entries(scratch_tmp))[:20]}"
    written = _written_to_home(scratch_home)
    assert not written, f"the run wrote into $HOME: {written[:20]}"


def test_certify_against_a_leaky_local_backend_leaves_nothing(tmp_path):
    """Loaded by module:attr (no fake), so even the boxes live wherever the backend puts them by default."""
    result, scratch_tmp, scratch_home, output = _probe(
        tmp_path,
        sys.executable,
        "-m",
        "conformance.cli",
        "certify",
        "--backend",
        "fakes.mutants.leaves_processes:provider",
        "--out",
        "/tmp/out",
    )
    assert result["returncode"] == 1, output[-3000:]
    report = json.loads((scratch_tmp / "out" / "report.json").read_text())
    failed = {c["id"] for c in report["clauses"] if c["verdict"] == "fail"}
    assert "timeout.kills-tree" in failed, f"the mutant did not leak as it should: {sorted(failed)}"
    _nothing_left(result, scratch_tmp, scratch_home, output, keep={"out"})
    assert {p.name for p in (scratch_tmp / "out").iterdir()} == {
        "report.json",
        "report.md",
        "report.html",
        "junit.xml",
        "badge.json",
    }


def test_a_local_backend_without_isolation_never_works_in_the_users_home(tmp_path):
    """A backend that runs commands with the kit's own HOME, TMPDIR and cwd: the checks' files
    ($HOME/.kit-*, odd directory names, kit_src.sh in the working directory) go to the run's sandbox."""
    # The scratch /tmp is /tmp inside the namespace: the plugin goes there (and is expected there).
    plugin = tmp_path / "tmp" / "host_shell"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text('name: host-shell\nversion: "1.0"\ndescription: local bash\nkind: backend\n')
    (plugin / "__init__.py").write_text(HOST_SHELL_PLUGIN)
    result, scratch_tmp, scratch_home, output = _probe(
        tmp_path,
        *suite_command.command(
            "--backend", "/tmp/host_shell", "-k", "test_exec or test_cwd or test_identity or test_persist", workers=2
        ),
    )
    assert "passed" in output, output[-3000:]
    _nothing_left(result, scratch_tmp, scratch_home, output, keep={"host_shell"})


@pytest.mark.parametrize("backend", ["tempdir_box", "upstash_box"])
def test_doctor_leaves_nothing(tmp_path, backend):
    result, scratch_tmp, scratch_home, output = _probe(
        tmp_path, sys.executable, "-m", "conformance.cli", "doctor", "--backend", backend, timeout=300
    )
    assert result["returncode"] == 0, output[-3000:]
    _nothing_left(result, scratch_tmp, scratch_home, output, keep=set())


def test_the_probes_work_from_a_project_under_tmp(tmp_path):
    """A clone under /tmp (and its virtualenv) stays visible under the probe's private /tmp."""
    clone = Path(tempfile.mkdtemp(prefix="kit-clone-", dir="/tmp"))
    try:
        tracked = (
            subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
            .stdout.decode()
            .split("\0")
        )
        for name in filter(None, tracked):
            if (ROOT / name).is_file():
                (clone / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, clone / name)
        probe = "import conformance, isolation; print('from', conformance.__file__)"
        result, scratch_tmp, scratch_home, output = _probe(
            tmp_path, sys.executable, "-c", probe, root=clone, env_extra={"PYTHONPATH": str(clone)}, timeout=120
        )
        assert result["returncode"] == 0, output[-3000:]
        assert f"from {clone.resolve()}/conformance/__init__.py" in output, output[-3000:]
        _nothing_left(result, scratch_tmp, scratch_home, output, keep={clone.name})
    finally:
        shutil.rmtree(clone, ignore_errors=True)

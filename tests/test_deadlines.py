"""Every run ends and says why: bounded backend calls, and setup errors as one line before any worker."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import suite_command
from conformance.host.calls import CallHung
from conformance.host.loader import LoadError, load
from conformance.host.registry import ProviderRegistry
from conformance.run import KitRun, RunOptions
from tests.conftest import ROOT

MANIFEST = 'name: {name}\nversion: "1.0"\ndescription: a test plugin\nkind: backend\n'

# A tempdir_box provider whose create_environment / cleanup wait until a release file exists
# (so a test can let the stuck thread go), or forever when no release file is named.
WAITING_PLUGIN = """
import os, time
from fakes.tempdir_box.box_provider import TempdirBoxProvider

RELEASE = {release!r}


def wait():
    while RELEASE is None or not os.path.exists(RELEASE):
        time.sleep(0.05)


class WaitingProvider(TempdirBoxProvider):
    name = "waiting_box"

    def create_environment(self, **kwargs):
        if {hang_create!r}:
            wait()
        env = super().create_environment(**kwargs)
        if {hang_cleanup!r}:
            cleanup = env.cleanup
            env.cleanup = lambda: (wait(), cleanup())
        return env


def register(ctx):
    if {hang_register!r}:
        wait()
    if {register_raises!r}:
        raise RuntimeError("the vendor SDK is not configured")
    ctx.register_terminal_environment_provider(WaitingProvider())
"""


def plugin(
    tmp_path: Path,
    name: str = "waiting",
    *,
    release: Path | None = None,
    hang_create: bool = False,
    hang_cleanup: bool = False,
    hang_register: bool = False,
    register_raises: bool = False,
    manifest: str | None = None,
) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "plugin.yaml").write_text(MANIFEST.format(name=name) if manifest is None else manifest)
    (directory / "__init__.py").write_text(
        WAITING_PLUGIN.format(
            release=str(release) if release else None,
            hang_create=hang_create,
            hang_cleanup=hang_cleanup,
            hang_register=hang_register,
            register_raises=register_raises,
        )
    )
    return directory


# ------------------------------------------------------------------ loading: one line, with the fix
@pytest.mark.parametrize(
    "manifest, expected",
    [
        (
            "name: x\n  bad: [\n",
            "is not valid YAML (line 2, column 6: mapping values are not allowed here) — fix the file",
        ),
        ("- just\n- a list\n", "must hold a mapping (name, version, description, kind), not a list — fix the file"),
    ],
)
def test_a_bad_plugin_yaml_is_one_line_naming_the_file(tmp_path, builtin_host, manifest, expected):
    directory = plugin(tmp_path, manifest=manifest)
    with pytest.raises(LoadError) as caught:
        load(str(directory), ProviderRegistry())
    message = str(caught.value)
    assert "\n" not in message and str(directory / "plugin.yaml") in message and expected in message


def test_register_that_raises_is_one_line_with_the_fix(tmp_path, builtin_host):
    with pytest.raises(LoadError) as caught:
        load(str(plugin(tmp_path, register_raises=True)), ProviderRegistry())
    message = str(caught.value)
    assert "\n" not in message
    assert "failed in register(ctx): RuntimeError: the vendor SDK is not configured" in message
    assert "fix register(ctx)" in message


def test_an_import_error_is_told_apart_from_register(tmp_path, builtin_host):
    directory = plugin(tmp_path)
    (directory / "__init__.py").write_text("import kit_no_such_module_anywhere\n")
    with pytest.raises(
        LoadError,
        match=r"failed in importing it: ModuleNotFoundError: .* — install what provides "
        r"the module 'kit_no_such_module_anywhere'",
    ):
        load(str(directory), ProviderRegistry())


def test_a_register_that_never_returns_is_a_load_error_naming_the_deadline(tmp_path, builtin_host):
    release = tmp_path / "release"
    try:
        with pytest.raises(LoadError) as caught:
            load(str(plugin(tmp_path, release=release, hang_register=True)), ProviderRegistry(), deadline=0.5)
    finally:
        release.touch()
    assert "(import and register(ctx)) did not return within 0.5s" in str(caught.value)


# ------------------------------------------------------------------ backend calls
def test_a_hanging_create_fails_once_then_at_once(tmp_path, builtin_host):
    release = tmp_path / "release"
    run = KitRun.start(
        RunOptions(
            backend=str(plugin(tmp_path, release=release, hang_create=True)),
            fake="tempdir",
            host="builtin",
            call_deadline=0.5,
        ),
        tmp_path / "work",
    )
    try:
        with pytest.raises(CallHung, match=r"create_environment\(task_id='kit-check-\w+'\) did not return within 0.5s"):
            run.create()
        with pytest.raises(CallHung, match="after that hang the kit calls create_environment"):
            run.create()  # no second wait: the first hang's message at once
    finally:
        release.touch()
        run.close()


def test_a_hanging_cleanup_is_named_and_the_run_still_closes(tmp_path, builtin_host):
    release = tmp_path / "release"
    run = KitRun.start(
        RunOptions(
            backend=str(plugin(tmp_path, release=release, hang_cleanup=True)),
            fake="tempdir",
            host="builtin",
            call_deadline=0.5,
        ),
        tmp_path / "work",
    )
    try:
        env = run.create()
        with pytest.raises(CallHung, match=r"cleanup\(\) of \w+ did not return within 0.5s"):
            run.release(env)
    finally:
        release.touch()
        run.close()


def test_a_failed_start_undoes_what_it_did(tmp_path, builtin_host):
    before = dict(os.environ)
    with pytest.raises(LoadError):
        KitRun.start(
            RunOptions(backend=str(plugin(tmp_path, register_raises=True)), fake="tempdir", host="builtin"),
            tmp_path / "work",
        )
    assert dict(os.environ) == before


# ------------------------------------------------------------------ whole runs
def _kit_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TEMPDIR_BOX_", "HERMES_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.mark.suite
def test_certify_with_a_create_that_never_returns_ends_and_names_the_call(tmp_path):
    """The bound: one call deadline per worker (5 s here, 60 s by default) plus the rest of the suite failing
    fast; the subprocess timeout below is the test's own limit, far above it."""
    directory = plugin(tmp_path, hang_create=True)  # no release file: create never returns
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.cli",
            "certify",
            "--backend",
            str(directory),
            "--fake",
            "tempdir",
            "--out",
            str(tmp_path / "out"),
            "--call-deadline",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=_kit_env(),
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "a backend call overran its deadline (its check failed; the run went on): create_environment(task_id=" in (
        proc.stderr
    ), proc.stderr[-2000:]
    assert "did not return within 5s" in proc.stderr


def _bad_setups(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    bad_config = tmp_path / "bad-config.yaml"
    bad_config.write_text("env: [1, 2]\n")
    return {
        "path": (
            ["--backend", str(tmp_path / "no-such-plugin")],
            f"{tmp_path / 'no-such-plugin'} is not a directory — give a plugin directory",
        ),
        "plugin.yaml": (
            ["--backend", str(plugin(tmp_path, "badyaml", manifest="name: x\n  bad: [\n"))],
            "plugin.yaml is not valid YAML (line 2, column 6",
        ),
        "register": (
            ["--backend", str(plugin(tmp_path, "raises", register_raises=True))],
            "failed in register(ctx): RuntimeError: the vendor SDK is not configured — fix register(ctx)",
        ),
        "backend-config": (["--backend-config", str(bad_config)], "env must be a mapping of variable names to strings"),
    }


def _one_error_line(output: str, expected: str) -> None:
    assert "INTERNALERROR" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if "hermes-backend-kit:" in line]
    assert len(errors) == 1 and expected in errors[0], output[-3000:]


@pytest.mark.suite
@pytest.mark.parametrize("case", ["path", "plugin.yaml", "register", "backend-config"])
def test_a_setup_error_under_xdist_is_one_line(tmp_path, case):
    args, expected = _bad_setups(tmp_path)[case]
    proc = subprocess.run(
        suite_command.command(*args, workers=2),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_kit_env(),
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    _one_error_line(proc.stdout + proc.stderr, expected)


@pytest.mark.suite
@pytest.mark.parametrize("case", ["plugin.yaml", "register"])
def test_a_setup_error_in_certify_is_one_line(tmp_path, case):
    args, expected = _bad_setups(tmp_path)[case]
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "certify", *args, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_kit_env(),
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr[-3000:]
    assert "the run ended before writing a report" not in proc.stderr


@pytest.mark.suite
@pytest.mark.skipif(
    shutil.which("nox") is None and not (Path(sys.executable).parent / "nox").exists(),
    reason="nox is not installed (pip install nox)",
)
def test_a_setup_error_in_nox_is_one_line(tmp_path):
    args, expected = _bad_setups(tmp_path)["plugin.yaml"]
    nox = shutil.which("nox", path=_kit_env()["PATH"])
    # --no-venv --no-install: the session runs with this interpreter, as it would in its own venv.
    # The session runs `hermes-backend-kit certify`, which prints the setup error as its one `error:` line.
    proc = subprocess.run(
        [
            nox,
            "-f",
            str(ROOT / "noxfile.py"),
            "--no-venv",
            "--no-install",
            "-s",
            "conformance",
            "--",
            *args,
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_kit_env(),
    )
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in output and "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], output[-3000:]


def test_a_check_that_runs_past_its_deadline_fails_naming_it(pytester):
    pytester.makepyfile(
        test_slow_check="""
        import time
        import pytest

        @pytest.mark.clause("exec.result-shape")
        def test_waits_for_a_backend_that_never_answers(kit):
            time.sleep(120)
    """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--check-deadline", "2", timeout=300)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CheckDeadline: the check ran past the kit's 2s deadline (--check-deadline)*"])

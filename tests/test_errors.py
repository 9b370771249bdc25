"""Bad input is one KitError with a fix, printed as one line with a uniform exit code by every command.

The command-line tests run the real console entry (``python -m conformance.cli``) in a subprocess:
exit 2 and exactly one stderr line ``error: <what> — <fix>`` for bad input, 1 for a run whose answer
is no, 3 for a bug, and a traceback only with --debug.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance import cli, config, contract, errors, leftovers, waivers
from conformance.host import loader
from conformance.report import bench_plot, files

CLI = [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "conformance.cli"]
BINARY = bytes(range(256)) * 4  # not UTF-8, not JSON, not YAML

PROVIDER = """
from fakes.tempdir_box.box_provider import TempdirBoxProvider


class Provider(TempdirBoxProvider):
    name = "broken_box"
{body}

def register(ctx):
    ctx.register_terminal_environment_provider(Provider())
"""
MANIFEST = 'name: broken_box\nversion: "1.0"\ndescription: a box for error tests\nkind: backend\n'


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HERMES_", "TEMPDIR_BOX_"))}
    return {**env, **extra}


def _run(
    *args: object, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env or _env()
    )


def _plugin(root: Path, *, manifest: str = MANIFEST, body: str = "    pass\n", name: str = "broken_box") -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "plugin.yaml").write_text(manifest)
    (directory / "__init__.py").write_text(PROVIDER.format(body=body))
    return directory


def _one_error_line(done: subprocess.CompletedProcess, *expected: str) -> str:
    """The single stderr line of a bad-input exit: `error: <what> — <fix>`, no traceback."""
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: ") and " — " in lines[0], lines[0]
    assert "Traceback" not in done.stdout + done.stderr and "INTERNALERROR" not in done.stdout + done.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ the hierarchy
def test_every_kit_error_class_has_a_fix_and_the_docstring_tree_names_them_all():
    classes = errors.all_classes()
    assert {c.__name__ for c in classes} >= {
        "KitError",
        "ContractError",
        "BackendLoadError",
        "PluginManifestError",
        "BackendConfigError",
        "WaiverError",
        "ReportFileError",
        "SignatureError",
        "ScaffoldError",
        "BenchFileError",
    }
    for cls in classes:
        assert isinstance(cls.fix, str) and cls.fix.strip(), f"{cls.__name__} has no fix of its own"
        error = cls.__new__(cls)
        errors.KitError.__init__(error, "something is wrong")
        assert error.fix == cls.fix and error.line() == f"something is wrong — {cls.fix}"
    tree = errors.__doc__ or ""
    defined = [n.name for n in ast.parse(Path(errors.__file__).read_text()).body if isinstance(n, ast.ClassDef)]
    for name in defined:
        assert f" {name} " in tree, f"{name} is missing from the tree in conformance/errors.py's docstring"


def test_the_old_names_are_the_new_classes_and_still_the_builtin_kinds():
    assert loader.LoadError is errors.BackendLoadError and issubclass(errors.PluginManifestError, loader.LoadError)
    assert config.BackendConfigError is errors.BackendConfigError and contract.ContractError is errors.ContractError
    assert waivers.WaiverError is errors.WaiverError and issubclass(bench_plot.BenchFileError, errors.InputFileError)
    assert issubclass(errors.ContractError, ValueError) and issubclass(errors.BackendLoadError, RuntimeError)
    assert issubclass(errors.RouteTableError, errors.BackendConfigError)


def test_an_error_crosses_processes_as_its_own_class_with_what_why_and_fix():
    sent = errors.ContractError(
        "x.yaml is not a valid contract (2 problem(s))",
        "fix the named fields",
        why="clauses[0].level: bad; clauses[1].id: repeats",
    )
    back = errors.KitError.from_dict(json.loads(json.dumps(sent.to_dict())))
    assert type(back) is errors.ContractError and (back.what, back.why, back.fix) == (sent.what, sent.why, sent.fix)
    assert (
        str(back) == "x.yaml is not a valid contract (2 problem(s)): clauses[0].level: bad; clauses[1].id: "
        "repeats — fix the named fields"
    )
    unknown = errors.KitError.from_dict({"kind": "NoSuchError", "what": "w", "fix": ""})
    assert type(unknown) is errors.KitError and unknown.fix == errors.KitError.fix


@pytest.mark.parametrize(
    "read, kind, expected",
    [
        (lambda p: config.load(str(p), set()), errors.BackendConfigError, "not UTF-8 text"),
        (lambda p: waivers.load(p, contract.load()), errors.WaiverError, "not UTF-8 text"),
        (lambda p: files.read_report(p), errors.ReportFileError, "not UTF-8 text"),
        (lambda p: contract.load(p.parent), errors.ContractFileError, "it is a directory"),
        (lambda p: loader.read_manifest(p.parent), errors.PluginManifestError, "not UTF-8 text"),
    ],
)
def test_lower_layer_errors_become_the_most_specific_kit_error(tmp_path, read, kind, expected):
    path = tmp_path / "plugin.yaml"
    path.write_bytes(BINARY)
    with pytest.raises(kind) as caught:
        read(path)
    assert expected in caught.value.what and caught.value.fix and caught.value.__cause__ is None


# ------------------------------------------------------------------ the command line: exit 2, one line
def test_certify_with_a_backend_that_does_not_exist(tmp_path):
    done = _run("certify", "--backend", "./nonexistent", "--out", tmp_path / "out", cwd=tmp_path)
    _one_error_line(done, "./nonexistent is not a directory — give a plugin directory")


@pytest.mark.parametrize(
    "manifest, expected",
    [
        ("name: broken_box\n  version: [\n", "plugin.yaml is not valid YAML (line 2, column 10"),
        ("- name\n- version\n", "must hold a mapping (name, version, description, kind), not a list — fix the file"),
    ],
)
def test_certify_with_a_broken_plugin_yaml(tmp_path, manifest, expected):
    directory = _plugin(tmp_path, manifest=manifest)
    done = _run("certify", "--backend", directory, "--fake", "tempdir", "--out", tmp_path / "out", cwd=tmp_path)
    _one_error_line(done, str(directory / "plugin.yaml"), expected)


def test_certify_with_a_plugin_directory_that_is_no_package(tmp_path):
    directory = tmp_path / "no_init"
    directory.mkdir()
    (directory / "plugin.yaml").write_text(MANIFEST)
    done = _run("certify", "--backend", directory, "--fake", "tempdir", "--out", tmp_path / "out", cwd=tmp_path)
    _one_error_line(done, "has no __init__.py — make the directory a Python package")


def test_a_setup_error_under_debug_shows_the_runs_traceback(tmp_path):
    done = _run("--debug", "certify", "--backend", "./nonexistent", "--out", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr and "conformance/host/loader.py" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("error: ./nonexistent is not a directory — ")


@pytest.mark.parametrize("content", [None, BINARY])
@pytest.mark.parametrize(
    "command", [["verify"], ["report", "compare"], ["report", "summary"], ["report", "matrix"], ["report", "html"]]
)
def test_report_commands_on_a_missing_or_binary_file(tmp_path, command, content):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_bytes(content)
    args = [
        *command,
        path,
        *([path] if command[-1] == "compare" else []),
        *(["--out", tmp_path / "page.html"] if command[-1] == "html" else []),
    ]
    line = _one_error_line(
        _run(*args, cwd=tmp_path), f"cannot read report {path}", "no such file" if content is None else "not UTF-8 text"
    )
    assert line.endswith("— pass a report.json written by `hermes-backend-kit certify` (or pytest --report)")


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[object], str]]:
    existing = tmp_path / "key"
    existing.write_text("mine")
    return {
        "backend-config": (
            [
                "certify",
                "--backend",
                "tempdir_box",
                "--backend-config",
                tmp_path / "no.yaml",
                "--out",
                tmp_path / "out",
            ],
            "--backend-config",
        ),
        "waivers": (
            ["certify", "--backend", "tempdir_box", "--waivers", tmp_path / "no.yaml", "--out", tmp_path / "out"],
            "--waivers",
        ),
        "doctor": (["doctor", "--backend", "./nonexistent"], "is not a directory"),
        "verify half": (
            ["verify", tmp_path / "r.json", "--signature", tmp_path / "r.sig"],
            "--signature and --public-key go together",
        ),
        "sign": (["sign", tmp_path / "r.json", "--key", tmp_path / "no.key"], "private key"),
        "keygen": (["keygen", "--key", existing], "keygen never overwrites a key"),
        "contract show": (["contract", "show", "exec.nope"], "unknown clause 'exec.nope'"),
        "contract validate": (["contract", "validate", tmp_path / "no.yaml"], "cannot read contract"),
        "init-plugin": (["init-plugin", "Acme", "--dir", tmp_path / "p"], "'Acme' is not lowercase"),
        "fake serve": (["fake", "serve", "cloudflare", "--max-sandboxes", "5"], "has no sandbox cap"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "backend-config",
        "waivers",
        "doctor",
        "verify half",
        "sign",
        "keygen",
        "contract show",
        "contract validate",
        "init-plugin",
        "fake serve",
    ],
)
def test_every_command_reports_bad_input_the_same_way(tmp_path, case):
    args, expected = _bad_inputs(tmp_path)[case]
    done = _run(*args, cwd=tmp_path, timeout=120)
    _one_error_line(done, expected)
    assert "certifying" not in done.stdout  # certify refused before starting a run


def test_debug_by_environment_variable(tmp_path):
    done = _run("verify", tmp_path / "missing.json", cwd=tmp_path, env=_env(HERMES_KIT_DEBUG="1"))
    assert done.returncode == 2 and "Traceback (most recent call last)" in done.stderr
    assert "ReportFileError" in done.stderr and done.stderr.splitlines()[-1].startswith("error: cannot read report")


def test_an_error_line_never_shows_a_credential(tmp_path):
    secret = "sk-kit-canary-7Qm2Zr9x"
    done = _run("verify", tmp_path / f"{secret}.json", cwd=tmp_path, env=_env(ACME_API_KEY=secret))
    line = _one_error_line(done, "cannot read report")
    assert secret not in done.stderr and "***.json" in line


def test_help_lists_the_exit_codes():
    done = subprocess.run([*CLI, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for code, _ in cli.EXIT_CODES:
        assert f"\n  {code:<4} " in done.stdout, done.stdout
    assert "--debug" in done.stdout and "HERMES_KIT_DEBUG" in done.stdout


# ------------------------------------------------------------------ exit 1 and exit 3
def test_a_run_that_is_not_certified_exits_1(tmp_path):
    """A plugin.yaml without a version loads (Hermes would load it too): the register.manifest check fails it.

    PYTEST_ADDOPTS narrows the run to that one check, which keeps the test fast (a narrowed run is never
    certified either; the reasons name the failing clause)."""
    manifest = "name: broken_box\ndescription: no version\nkind: backend\n"
    directory = _plugin(tmp_path, manifest=manifest)
    out = tmp_path / "out"
    done = _run(
        "certify",
        "--backend",
        directory,
        "--fake",
        "tempdir",
        "--workers",
        "0",
        "--out",
        out,
        cwd=tmp_path,
        env=_env(PYTEST_ADDOPTS="-k test_manifest_describes_a_backend"),
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in report["clauses"]}
    assert (
        verdicts["register.manifest"] == "fail"
        and "MUST clause register.manifest failed" in report["not_certified_because"]
    )
    assert "error:" not in done.stderr and "Traceback" not in done.stderr


def test_a_bug_is_one_line_and_exit_3_and_its_traceback_only_with_debug(monkeypatch, capsys):
    def broken(args):
        raise ZeroDivisionError("the kit divided by zero")

    monkeypatch.setattr(cli, "cmd_backends", broken)
    assert cli.main(["backends"]) == 3
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: internal error (ZeroDivisionError: the kit divided by zero) — rerun with "
        "--debug and report it with the traceback"
    ]
    for argv in (["--debug", "backends"], ["backends", "--debug"]):
        assert cli.main(argv) == 3
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "in broken" in err


# ------------------------------------------------------------------ doctor: each row's own fix
def test_doctor_names_the_unset_variable_the_plugin_requires(tmp_path):
    manifest = MANIFEST + "requires_env:\n  - BROKEN_BOX_KEY\n"
    body = "    def is_available(self):\n        return False\n"
    done = _run(
        "doctor",
        "--backend",
        _plugin(tmp_path, manifest=manifest, body=body),
        "--fake",
        "tempdir",
        cwd=tmp_path,
        env=_env(),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  is_available         is_available() returned False\n" in done.stdout
    assert "      fix: set BROKEN_BOX_KEY (plugin.yaml requires_env)\n" in done.stdout
    assert "None" not in done.stdout


def test_doctor_fixes_come_from_each_rows_failure(tmp_path):
    body = (
        "    def probe(self):\n"
        "        return ('unreachable', 'the endpoint refused the connection')\n"
        "    def doctor_checks(self):\n"
        "        return [(True, 'sdk', 'installed'), (False, 'quota', '3 of 3 sandboxes in use')]\n"
        "    def create_environment(self, *args, **kwargs):\n"
        "        env = super().create_environment(*args, **kwargs)\n"
        "        env.execute = lambda command, **kw: {'output': 'nothing ran'}\n"
        "        return env\n"
    )
    done = _run("doctor", "--backend", _plugin(tmp_path, body=body), "--fake", "tempdir", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = done.stdout.splitlines()
    fixes = {
        rows[i - 1][6:26].strip(): line.removeprefix("      fix: ")
        for i, line in enumerate(rows)
        if line.startswith("      fix: ")
    }
    assert fixes == {
        "probe": "fix what the probe reports: the endpoint refused the connection",
        "doctor_checks": "fix what the backend's own check(s) quota report",
        "round trip": "put the command's exit status under 'returncode'",
    }, done.stdout
    assert "FAIL  doctor_checks        quota: 3 of 3 sandboxes in use" in done.stdout
    assert "None" not in done.stdout


@pytest.mark.suite
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_certify_stopped_by_a_signal_ends_its_run_and_removes_its_temp_root(tmp_path, sig):
    """CI, nox or a closed terminal stops certify: its run's processes end and its temp root goes."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.Popen(
        [*CLI, "certify", "--backend", "tempdir_box", "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        env=_env(TMPDIR=str(temp)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        # Wait until the run is under way: its temp root holds pytest's per-worker directories.
        while not list(temp.glob("hermes-kit-certify-*/pytest/popen-gw*")):
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
            time.sleep(0.2)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert f"interrupted ({signal.Signals(sig).name})" in err
    assert list(temp.iterdir()) == [], "certify left its temp root behind"
    assert not leftovers.processes_under(temp), "certify left processes of its run"


def test_a_root_whose_run_was_killed_is_removed_by_the_next_run_and_a_live_ones_kept(tmp_path):
    """SIGKILL leaves no chance to clean up: the next run removes a root whose owner process is gone (and what
    still runs under it), never one whose owner runs, nor one it cannot tell."""
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    orphan = tmp_path / "hermes-kit-certify-orphan"
    orphan.mkdir()
    (orphan / "pytest").mkdir()
    (orphan / leftovers.OWNER_FILE).write_text(f"{killed.pid} {leftovers._started(killed.pid)}\n")
    killed.kill()
    killed.wait()
    live = tmp_path / "hermes-kit-certify-live"
    live.mkdir()
    leftovers.claim(live)
    unmarked = tmp_path / "hermes-kit-certify-unmarked"
    unmarked.mkdir()
    assert leftovers.sweep_orphaned(tmp_path, "hermes-kit-certify-") == [orphan]
    assert not orphan.exists() and live.is_dir() and unmarked.is_dir()


# ------------------------------------------------------------------ messages that name the real failure
def test_a_tool_plugin_is_told_it_is_not_a_terminal_backend(tmp_path):
    directory = tmp_path / "a_tool"
    directory.mkdir()
    (directory / "plugin.yaml").write_text("name: a_tool\nversion: '1.0'\ndescription: a tool\nkind: standalone\n")
    (directory / "__init__.py").write_text("def register(ctx):\n    ctx.register_tool('say', lambda: 'hi')\n")
    done = _run("doctor", "--backend", directory, "--fake", "tempdir", cwd=tmp_path)
    line = _one_error_line(done)
    assert "is not a terminal backend: its register(ctx) called register_tool (plugin.yaml kind: standalone)" in line
    assert "become" not in line and "call ctx.register_terminal_environment_provider(provider) in" not in line


def test_a_class_that_is_not_a_provider_is_named_as_such_never_called_as_register(tmp_path):
    (tmp_path / "not_provider.py").write_text(
        "CALLS = []\n\nclass Helper:\n    def __init__(self, *args):\n        CALLS.append(args)\n"
    )
    done = _run("doctor", "--backend", "not_provider:Helper", "--fake", "tempdir", cwd=tmp_path)
    line = _one_error_line(done)
    assert "names the class Helper, which is not a TerminalEnvironmentProvider subclass" in line
    assert "agent.terminal_env_provider.TerminalEnvironmentProvider" in line, "Hermes's name, as a plugin imports it"
    assert "conformance.host" not in line, "never the kit's internal path"


@pytest.mark.suite
def test_certify_twice_into_a_folder_named_like_the_backend(tmp_path):
    for _ in range(2):
        done = _run("certify", "--backend", "tempdir_box", "--select", "probe", "--out", "tempdir_box", cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "has no __init__.py" not in done.stderr and (tmp_path / "tempdir_box" / "report.json").is_file()


def test_a_lost_run_record_says_the_sandbox_lost_its_files():
    from conformance.checks._run_count import RunCount

    said = RunCount(0, gone="~/work (provider attribute conformance_persistent_path)").explain()
    assert "gone from every sandbox" in said and "stopped, reset or replaced" in said and "~/work" in said
    assert "0 run" not in said


def test_a_selection_that_keeps_no_check_is_a_usage_error_naming_the_syntax(tmp_path):
    done = _run(
        "certify", "--backend", "tempdir_box", "--select", "no_such_check or no_other_check", "--out", "o", cwd=tmp_path
    )
    line = _one_error_line(done, "--select no_such_check or no_other_check kept no check", "-k expression")
    assert "internal error" not in line and not (tmp_path / "o").exists()


def test_a_reader_that_stops_early_is_no_error():
    """`contract list | head -1`: the pipe closes under the kit's output; that is what the user asked for.
    The pipe holds one page, so the kit is still writing when the reader goes (15 KB of clauses)."""
    import fcntl

    shown = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "contract", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert shown.stdout is not None and shown.stderr is not None
    fcntl.fcntl(shown.stdout.fileno(), 1031, 4096)  # F_SETPIPE_SZ: the smallest pipe Linux allows
    shown.stdout.readline()
    shown.stdout.close()  # the reader goes away with the rest unread
    err = shown.stderr.read().decode()
    assert shown.wait(60) == 0 and "internal error" not in err and "BrokenPipe" not in err, err


@pytest.mark.suite
def test_a_selection_whose_should_clause_fails_answers_no(tmp_path):
    """README's exit codes: a --select run exits 1 when a clause it ran failed, a SHOULD one too."""
    done = _run(
        "certify",
        *("--backend", "fakes.mutants.quiet_sync_back:provider", "--fake", "tempdir"),
        *("--select", "sync.failure-reported", "--workers", "0", "--out", "o"),
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "SHOULD clause(s) it ran failed" in done.stderr


def test_failures_that_could_not_enter_root_end_with_a_hint_to_set_the_cwd():
    def clause(cid, excerpt):
        return {"id": cid, "verdict": "fail", "checks": [{"id": f"{cid}::t", "outcome": "failed", "excerpt": excerpt}]}

    denied = "rc 126: 'bash: line 3: cd: /root: Permission denied'"
    report = {"clauses": [clause(f"exec.c{i}", denied) for i in range(4)] + [clause("other", "rc 1")]}
    hint = cli._default_cwd_hint(report)
    assert (
        hint is not None and hint.startswith("hint: 4 failing clauses could not enter /root") and "terminal.cwd" in hint
    )
    assert cli._default_cwd_hint({"clauses": report["clauses"][:2]}) is None, "two such failures are no pattern"

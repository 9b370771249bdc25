"""exec: what execute() returns and how commands run."""

from __future__ import annotations

import inspect
import threading

import pytest

from conformance.checks._support import out, rc, run

pytestmark = pytest.mark.usefixtures("kit")


@pytest.mark.clause("exec.result-shape")
def test_true_returns_output_and_returncode(env):
    result = run(env, "true")
    assert isinstance(result, dict), f"execute() returned {type(result).__name__}, not a dict"
    assert type(result.get("returncode")) is int, f"returncode is {result.get('returncode')!r}, not an int"
    assert result["returncode"] == 0
    assert isinstance(result.get("output"), str), "output must be a str"


@pytest.mark.clause("exec.returncode-key")
@pytest.mark.parametrize("code", [1, 3, 42, 255])
def test_exit_status_is_under_returncode(env, code):
    result = run(env, f"exit {code}")
    assert "returncode" in result, f"no 'returncode' key (keys: {sorted(result)}); Hermes reads only that key"
    assert result["returncode"] == code


@pytest.mark.clause("exec.merged-streams")
def test_stderr_is_merged_into_output(env):
    result = run(env, "echo to-stdout; echo to-stderr >&2")
    assert "to-stdout" in out(result) and "to-stderr" in out(result), out(result)


@pytest.mark.clause("exec.bash")
def test_commands_run_under_bash(env):
    script = (
        "set -o pipefail; arr=(a b c); [[ ${#arr[@]} -eq 3 ]] && echo arrays-ok; "
        "[[ $BASHPID =~ ^[0-9]+$ ]] && echo bashpid-ok; "
        "false | true; echo pipefail=$?; "
        "printf 'x=5\\n' > kit_src.sh; source kit_src.sh; echo sourced=$x; "
        "diff <(echo a) <(echo a) && echo procsub-ok"
    )
    text = out(run(env, script))
    for expected in ("arrays-ok", "bashpid-ok", "pipefail=1", "sourced=5", "procsub-ok"):
        assert expected in text, f"{expected} missing from {text!r}"


@pytest.mark.clause("exec.utf8")
def test_utf8_roundtrips_and_bad_bytes_are_replaced(env):
    text = "héllo wörld ✓ 日本語 🚀"
    assert out(run(env, f"printf '%s' '{text}'")) == text
    result = run(env, r"printf 'ok\xff\xfe\xc3end'")
    assert rc(result) == 0
    assert out(result) == "ok\ufffd\ufffd\ufffdend"


@pytest.mark.clause("exec.session-state")
def test_exported_variables_persist(env):
    run(env, "export KIT_STATE=kept KIT_SPACES='a b  c'")
    assert out(run(env, 'echo "$KIT_STATE|$KIT_SPACES"')).strip() == "kept|a b  c"
    seen: list[str] = []
    worker = threading.Thread(target=lambda: seen.append(out(run(env, "echo $KIT_STATE")).strip()))
    worker.start()
    worker.join(60)
    assert seen == ["kept"], f"another thread's call saw {seen!r}"
    run(env, "unset KIT_STATE")
    assert out(run(env, "echo ${KIT_STATE-unset}")).strip() == "unset", "an unset did not persist"


@pytest.mark.clause("exec.concurrent")
def test_concurrent_calls_get_their_own_results(env):
    results: dict[int, dict] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = run(env, f"sleep 0.$((RANDOM % 3)); echo call-{i}; exit {i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for i in range(8):
        assert out(results[i]).strip() == f"call-{i}", (i, results[i])
        assert rc(results[i]) == i


@pytest.mark.clause("exec.kwargs")
def test_execute_takes_the_callers_keywords(env):
    params = inspect.signature(env.execute).parameters
    assert "cwd" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    result = run(env, "echo ok", rewrite_compound_background=False, bounded_capture=True)
    assert out(result).strip() == "ok"
    assert rc(run(env, "true", bounded_capture=False, rewrite_compound_background=True)) == 0


TOOLS = (
    "bash",
    "base64",
    "sha256sum",
    "mktemp",
    "stat",
    "sed",
    "cut",
    "wc",
    "head",
    "tail",
    "readlink",
    "nohup",
    "kill",
    "pkill",
    "mv",
    "cat",
    "chmod",
    "touch",
    "awk",
    "grep",
    "python3",
)


@pytest.mark.clause("exec.tools")
def test_tools_hermes_uses_are_on_path(env):
    result = run(env, " ; ".join(f"command -v {t} >/dev/null || echo missing:{t}" for t in TOOLS))
    missing = [w.split(":", 1)[1] for w in out(result).split() if w.startswith("missing:")]
    assert not missing, f"not on PATH in the sandbox: {', '.join(missing)}"


@pytest.mark.clause("exec.signal-exit")
@pytest.mark.parametrize("sig,num", [("TERM", 15), ("KILL", 9)])
def test_signal_death_is_reported(env, sig, num):
    result = run(env, f"bash -c 'kill -{sig} $$'")
    assert rc(result) in (128 + num, -num), f"returncode {rc(result)} for a shell killed by SIG{sig}"


@pytest.mark.clause("exec.long-command")
def test_a_64k_command_runs(env):
    payload = "x" * (64 * 1024 - 200)
    result = run(env, f"v='{payload}'; echo ${{#v}}")
    assert out(result).strip() == str(len(payload))

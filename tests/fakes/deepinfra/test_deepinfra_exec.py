"""The DeepInfra fake's exec: argv without a shell, the NDJSON stream, timeouts, no stdin, stops mid-command."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from deepinfra import SandboxExecError

from fakes.deepinfra.testing import Tenant, eventually


def stream_lines(fake: Tenant, sandbox_id: str, command: list[str], timeout_seconds: int = 0) -> list[dict]:
    """Every NDJSON line of one exec, heartbeats included, as the wire carries them."""
    body = {"command": command, "timeout_seconds": timeout_seconds}
    headers = {"Authorization": f"Bearer {fake.key}"}
    with httpx.stream(
        "POST", f"{fake.server.base_url}/v1/sandboxes/{sandbox_id}/exec", json=body, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        raw = b"".join(response.iter_bytes())
    lines = raw.split(b"\n")
    assert lines[-1] == b"", "the stream must end with a newline"
    return [json.loads(line) for line in lines[:-1]]


def test_argv_runs_without_a_shell(sandbox):  # type: ignore[no-untyped-def]
    result = sandbox.exec("printf", "%s|", "$HOME", "a b", "'q'", "*")
    assert result.stdout == "$HOME|a b|'q'|*|" and result.returncode == 0
    result = sandbox.exec("bash", "-c", "echo out; echo err >&2; exit 7")
    assert (result.stdout, result.stderr, result.returncode) == ("out\n", "err\n", 7)


def test_the_stream_is_ndjson_with_one_terminal_line(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    lines = stream_lines(fake, sandbox.id, ["bash", "-c", "echo a; sleep 0.1; echo b >&2; exit 3"])
    assert lines[-1] == {"returncode": 3}
    assert {"stdout": "a\n"} in lines and {"stderr": "b\n"} in lines
    assert sum(1 for line in lines if "returncode" in line or "error" in line) == 1


def test_heartbeats_while_the_command_is_silent(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    fake.settings.heartbeat_s = 0.1
    lines = stream_lines(fake, sandbox.id, ["sleep", "0.55"])
    assert lines.count({}) >= 3 and lines[-1] == {"returncode": 0}
    assert sandbox.exec("sleep", "0.3").returncode == 0  # the SDK skips them


def test_output_is_utf8_decoded_per_stream_and_ascii_escaped(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    # A character split across two writes stays whole; invalid bytes become U+FFFD;
    # U+2028 and U+0085 are escaped, so a splitlines reader never splits a line.
    command = ["bash", "-c", r"printf '\xe2\x9c'; sleep 0.1; printf '\x93 \xff \xe2\x80\xa8 \xc2\x85 end'"]
    assert sandbox.exec(*command).stdout == "\u2713 \ufffd \u2028 \x85 end"
    raw = fake.http("POST", f"/v1/sandboxes/{sandbox.id}/exec", json={"command": command, "timeout_seconds": 0})
    assert raw.content.isascii() and "\\u2028" in raw.text


def test_stdin_is_dev_null(sandbox):  # type: ignore[no-untyped-def]
    result = sandbox.exec("bash", "-c", "readlink /proc/self/fd/0; cat; wc -c")
    assert result.stdout.split() == ["/dev/null", "0"]


def test_timeout_kills_the_command_with_an_error_line(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with pytest.raises(SandboxExecError, match="Command timed out after 1 seconds"):
        sandbox.exec("bash", "-c", "echo started; sleep 30", timeout=1)
    assert time.monotonic() - started < 5
    lines = stream_lines(fake, sandbox.id, ["bash", "-c", "echo x; sleep 30"], timeout_seconds=1)
    assert lines[0] == {"stdout": "x\n"} and lines[-1] == {"error": "Command timed out after 1 seconds"}
    assert not any(p.popen.poll() is None for p in fake.box(sandbox.id).processes), "the command still runs"


def test_timeout_zero_is_the_default_and_large_ones_are_capped(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    fake.settings.default_command_timeout_s = 0.5
    with pytest.raises(SandboxExecError, match=r"timed out after 0\.5 seconds"):
        sandbox.exec("sleep", "5")  # the SDK sends timeout_seconds 0
    from fakes.deepinfra.exec_stream import effective_timeout

    assert effective_timeout(fake.server.service, 7200) == 1800
    assert effective_timeout(fake.server.service, 42) == 42


def test_stopping_the_sandbox_ends_a_running_stream_with_an_error(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(sandbox.exec("bash", "-c", "echo up; sleep 30", timeout=60))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    box = fake.box(sandbox.id)
    assert eventually(lambda: any(p.popen.poll() is None for p in box.processes))
    fake.server.service.stop(box)
    worker.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], SandboxExecError)
    assert "stopped while the command was running" in str(outcome[0])


def test_terminating_the_sandbox_ends_a_running_stream_with_an_error(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    def later() -> None:
        time.sleep(0.3)
        sandbox.terminate()

    threading.Thread(target=later).start()
    with pytest.raises(SandboxExecError, match="terminated while the command was running"):
        sandbox.exec("sleep", "30", timeout=60)


def test_a_client_that_leaves_does_not_stop_the_command(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    body = {
        "command": ["bash", "-c", "echo $$ > /workspace/pid; sleep 2; echo done > /workspace/done"],
        "timeout_seconds": 30,
    }
    headers = {"Authorization": f"Bearer {fake.key}"}
    with httpx.stream(
        "POST", f"{fake.server.base_url}/v1/sandboxes/{sandbox.id}/exec", json=body, headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200
    # No cancel in the API: the command runs on; only a second exec (or a stop) can end it.
    assert eventually(lambda: sandbox.exec("cat", "/workspace/done").stdout == "done\n", 6)


def test_commands_run_concurrently_in_one_sandbox(sandbox):  # type: ignore[no-untyped-def]
    results: dict[int, str] = {}

    def run(i: int) -> None:
        results[i] = sandbox.exec("bash", "-c", f"sleep 0.3; echo {i}").stdout

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {i: f"{i}\n" for i in range(6)} and time.monotonic() - started < 2.5


def test_a_detached_child_does_not_hold_the_stream_open(sandbox):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    result = sandbox.exec("bash", "-c", "sleep 20 & echo bg")
    assert result.stdout == "bg\n" and time.monotonic() - started < 3


def test_output_limit_when_configured(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    fake.settings.output_limit_bytes = 100_000
    with pytest.raises(SandboxExecError, match="output exceeded the limit of 100000 bytes"):
        sandbox.exec("bash", "-c", "yes | head -c 10000000")

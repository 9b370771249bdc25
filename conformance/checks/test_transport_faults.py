"""faults: transport faults scripted through the fake service.

Each check arms one fault by role (create, exec, read; see
fakes/fault_script.py) on the fake this run talks to, makes the backend meet
it, and judges what Hermes would see.  A fault on a command meets it once,
through Hermes's terminal tool (conformance/host/drivers.py::terminal), which
runs a command again after execute() raises: a backend that raises once the
command may have started makes it run twice.  Commands count their own runs
in a file under $HOME (checks/_run_count.py), so "runs exactly once" is
measured rather than guessed.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conformance.checks._run_count import count_runs, counting, describe, drive
from conformance.checks._support import not_applicable, out, rc, run
from conformance.host.calls import Call, CallHung
from conformance.host.drivers import TerminalOutcome

pytestmark = pytest.mark.usefixtures("kit")

EXIT = 7  # the scripted commands' own exit code: any other code is the backend's


@pytest.fixture
def faults(kit, make_env):
    """The run's fault script; everything armed is cleared before the check's environments are released."""
    script = kit.world.faults
    yield script
    script.clear()


def _outcome(call: Call, budget: float, what: str) -> dict[str, Any] | BaseException:
    """The call's result, or the exception it raised; a hang past ``budget`` fails the check."""
    try:
        return call.result(budget, what)
    except CallHung as exc:
        raise AssertionError(f"{exc}: the backend must give up within that budget") from None
    except Exception as exc:  # raising is an allowed outcome before a command may have started
        return exc


def _describe(outcome: dict[str, Any] | BaseException) -> str:
    if isinstance(outcome, BaseException):
        return f"raised {type(outcome).__name__}: {str(outcome)[:200]}"
    return f"returned returncode {outcome.get('returncode')!r} with output {out(outcome)[-200:]!r}"


def _warm(env: Any) -> None:
    """One command first, so the fault meets the check's command and not the host's session setup."""
    assert rc(run(env, "true")) == 0, "a plain command failed before any fault was armed"


def _no_raise(outcome: TerminalOutcome, fault: str) -> None:
    assert not outcome.raised, (
        f"{fault} and {describe(outcome)}; once a command may have started, execute() must return a non-zero "
        "result: Hermes runs the command again after an exception, or reports exit 124 when its text says timeout"
    )


class _Abandoned(logging.Handler):
    """Records the host's deadline giving up on a wait the backend never ended."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "abandoned" in text:
            self.messages.append(text)


@contextlib.contextmanager
def _host_backstop() -> Iterator[_Abandoned]:
    """Watch the host's own deadline (``agent.deadline``) while a command runs.

    Current hosts wait for a command on a worker thread bounded a little past
    its timeout; when that bound passes they return 124 and abandon the
    worker, still blocked in the backend with its connection open.  A result
    that came from there is the host's, not the backend's: the backend held
    the command past its timeout.
    """
    watcher, log = _Abandoned(), logging.getLogger("agent.deadline")
    log.addHandler(watcher)
    try:
        yield watcher
    finally:
        log.removeHandler(watcher)


def _ended_by_backend(watcher: _Abandoned, fault: str) -> None:
    assert not watcher.messages, (
        f"{fault} and execute() returned only because the host's deadline gave up on it "
        f"({watcher.messages[0]}): the backend itself held the command past its timeout, leaving a blocked "
        "worker and an open connection behind; bound every wait on the service by the command's timeout"
    )


def _once(kit: Any, env: Any, record: str, outcome: TerminalOutcome, fault: str, *, expect: int = 1) -> None:
    """The command ran ``expect`` times (once when the fault let it start, never when it did not)."""
    count = count_runs(kit, env, record, expect=expect)
    if count.runs == expect:
        return
    if count.runs < expect:
        raise AssertionError(f"{fault}; the command's record shows {count.runs} run(s), expected {expect}"
                             f"{count.explain()}; {describe(outcome)}")
    again = "Hermes's terminal tool sent it again after execute() raised" if outcome.raised else "it was sent again"
    raise AssertionError(f"{fault} and the command ran {count.runs} time(s) where the service started it "
                         f"{expect} time(s): {again}; {describe(outcome)}")


# ------------------------------------------------------------------ dropped connection
@pytest.mark.clause("faults.dropped-mid-command")
def test_dropped_connection_fails_cleanly_and_is_not_retried(kit, env, faults):
    _warm(env)
    # 4 KiB of output before the pause: a fault cutting in after 2 KiB lands while the command runs.
    command, record = counting("drop", f"head -c 4096 /dev/zero | tr '\\0' s; echo; sleep 1; echo finished; exit {EXIT}")
    faults.arm("drop", "exec", after_bytes=2048)
    outcome = drive(env, command, timeout=10)
    faults.clear()
    fault = "the connection was dropped mid-command"
    _once(kit, env, record, outcome, fault)
    _no_raise(outcome, fault)
    assert outcome.exit_code != 0, (
        f"{fault} and {describe(outcome)}; the command exits {EXIT}, so a lost stream read as success"
    )
    if outcome.exit_code == EXIT:
        assert "finished" in outcome.output, (
            f"{describe(outcome)}: the command's own exit code with its output cut short"
        )


# ------------------------------------------------------------------ 429 on create
@pytest.mark.clause("faults.create-rate-limited")
def test_rate_limited_create_is_retried_with_backoff_then_reported(kit, make_env, faults):
    since = time.monotonic()
    armed = faults.arm("status", "create", status=429, times=2, message="Too many requests: rate limit exceeded")
    first = Call(lambda: run(make_env(), "echo up"))
    result = _outcome(first, 60, "creating an environment through two 429 answers")
    assert isinstance(result, dict) and rc(result) == 0 and "up" in out(result), (
        f"create was answered 429 twice (then accepted) and the first command {_describe(result)}; "
        "a rate limit must be retried"
    )
    if armed.fired == 0:
        not_applicable("the backend made no call on the fake's create route")
    tries = faults.attempts("create", since=since)
    assert len(tries) >= 2 and tries[1] - tries[0] >= 0.05, (
        f"the backend came back {tries[1] - tries[0]:.3f}s after a 429; a retry needs a backoff"
        if len(tries) >= 2 else "the backend retried a 429 once at most"
    )
    faults.clear()

    armed = faults.arm("status", "create", status=429, times=-1, message="Too many requests: rate limit exceeded")
    started = time.monotonic()
    outcome = _outcome(Call(lambda: run(make_env(), "echo up")), 60, "creating against a permanent 429")
    faults.clear()
    assert isinstance(outcome, BaseException) or rc(outcome) != 0, (
        f"every create was answered 429 and the first command {_describe(outcome)}"
    )
    message = str(outcome) if isinstance(outcome, BaseException) else out(outcome)
    assert any(word in message.lower() for word in ("429", "rate", "limit", "too many")), (
        f"creation failed after {time.monotonic() - started:.1f}s with a message that does not name the rate "
        f"limit: {message[:300]!r}"
    )
    assert armed.fired <= 10, f"the backend tried {armed.fired} times against a permanent 429; at most 10"


# ------------------------------------------------------------------ 5xx
@pytest.mark.clause("faults.read-5xx-retried")
def test_5xx_on_idempotent_reads_is_retried(make_env, faults):
    def session() -> dict[str, Any]:
        # The configured persistence mode: a persistent backend looks its sandbox up first.
        env = make_env(persistent=None)
        result = run(env, "echo read-ok")
        env.cleanup()
        return result

    armed = faults.arm("status", "read", status=503, times=2, message="Service temporarily unavailable")
    outcome = _outcome(Call(session), 60, "create, a command and cleanup through 503 on reads")
    if armed.fired == 0:
        not_applicable("the backend made no idempotent state read while creating, running and cleaning up")
    assert isinstance(outcome, dict) and rc(outcome) == 0 and "read-ok" in out(outcome), (
        f"idempotent reads were answered 503 ({armed.fired} times) and the command {_describe(outcome)}; "
        "reads must be retried"
    )


@pytest.mark.clause("faults.exec-5xx-not-retried")
def test_5xx_on_the_command_call_is_not_retried(kit, env, faults):
    _warm(env)
    command, record = counting("5xx", f"echo ran; exit {EXIT}")
    armed = faults.arm("status", "exec", status=500, message="Internal server error")
    outcome = drive(env, command, timeout=10)
    faults.clear()
    assert armed.fired >= 1, "the fault on the command call never fired; the world's exec routes are wrong"
    fault = "the command call was answered 500 (the fake ran nothing)"
    _once(kit, env, record, outcome, fault, expect=0)
    _no_raise(outcome, fault)
    assert outcome.exit_code != 0, f"{fault} and {describe(outcome)}"


# ------------------------------------------------------------------ silence, half-close
@pytest.mark.clause("faults.silent-server")
def test_silent_server_cannot_outlast_the_timeout(kit, env, faults):
    _warm(env)
    command, record = counting("silent", f"echo never; exit {EXIT}")
    faults.arm("silence", "exec")
    with _host_backstop() as watcher:
        outcome = drive(env, command, timeout=2)
    faults.clear()
    fault = "the service accepted the command call and never answered (it ran nothing)"
    _ended_by_backend(watcher, fault)
    _once(kit, env, record, outcome, fault, expect=0)
    _no_raise(outcome, fault)
    assert outcome.exit_code != 0, f"{fault} and {describe(outcome)}"


@pytest.mark.clause("faults.half-closed")
def test_half_closed_connection_cannot_outlast_the_timeout(kit, env, faults):
    _warm(env)
    command, record = counting("half", f"echo half; sleep 30; exit {EXIT}")
    faults.arm("half-close", "exec")
    with _host_backstop() as watcher:
        outcome = drive(env, command, timeout=2)
    faults.clear()
    fault = "the service stopped sending on the command's connection and kept it open"
    _ended_by_backend(watcher, fault)
    _once(kit, env, record, outcome, fault)
    _no_raise(outcome, fault)
    assert outcome.exit_code != 0, f"{fault} and {describe(outcome)}"


# ------------------------------------------------------------------ damaged frames
@pytest.mark.clause("faults.damaged-frame")
@pytest.mark.parametrize("kind", ["garbage", "truncate"])
def test_damaged_frame_never_becomes_a_wrong_exit_code(env, faults, kind):
    _warm(env)
    faults.arm(kind, "exec")
    outcome = _outcome(Call(env.execute, f"echo damaged-{kind}; exit {EXIT}", timeout=10), 20,
                       f"execute() with a {kind} frame")
    faults.clear()
    if isinstance(outcome, BaseException):
        return
    code = rc(outcome)
    assert code != 0, f"the command exited {EXIT} and a {kind} frame made execute() {_describe(outcome)}"
    if code != EXIT:
        assert out(outcome).strip() not in ("", f"damaged-{kind}"), (
            f"a {kind} frame made execute() {_describe(outcome)}: an infrastructure failure needs a message"
        )


# ------------------------------------------------------------------ finalizer
@pytest.mark.clause("faults.silent-finalizer")
def test_garbage_collection_does_not_wait_on_a_silent_service(kit, faults):
    used = kit.create(track=False)
    _warm(used)
    faults.arm("silence", "exec", times=-1)
    faults.arm("silence", "read", times=-1)
    caught: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: caught.append(f"{u.exc_type.__name__}: {u.exc_value}")
    try:
        del used
        outcome = _outcome(Call(gc.collect), 5, "gc.collect() of an environment while the service is silent")
    finally:
        sys.unraisablehook = previous
    assert not isinstance(outcome, BaseException), f"gc.collect() {_describe(outcome)}"
    assert not caught, f"finalizing an environment raised: {caught}"

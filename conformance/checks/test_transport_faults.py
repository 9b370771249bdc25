"""faults: transport faults scripted through the fake service.

Each check arms one fault by role (create, exec, read; see
fakes/fault_script.py) on the fake this run talks to, makes the backend meet
it, and judges what Hermes would see.  A fault on a command meets it once,
through Hermes's terminal tool (conformance/host/drivers.py::terminal), which
runs a command again after execute() raises: a backend that raises once the
command may have started makes it run twice.  Commands count their own runs
in a file under $HOME (checks/_run_count.py), so "runs exactly once" is
measured rather than guessed.  A fault that never met the backend leaves its
clause unverified: the check would otherwise judge a call nothing disturbed.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conformance.checks._run_count import Record, count_runs, counting, describe, drive
from conformance.checks._support import not_applicable, out, rc, run, unverified
from conformance.host.calls import Call, CallHung
from conformance.host.drivers import TerminalOutcome
from fakes.fault_script import Armed

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


def _fired(faults: Any, armed: Armed, fault: str) -> str:
    """No verdict when the armed fault never met the backend: the check would judge a fault-free call.
    Returns ``fault`` saying which connection it met, where the injector applied it blind."""
    if armed.fired == 0:
        unverified(
            f"the fault meant to make {fault} never fired: {faults.why_unfired(armed)}, so the clause's "
            "situation never happened"
        )
    landed = faults.landed(armed)
    return f"{fault} ({landed})" if landed else fault


def _no_raise(outcome: TerminalOutcome, fault: str) -> None:
    assert not outcome.raised, (
        f"{fault} and {describe(outcome)}; once a command may have started, execute() must return a non-zero "
        "result: Hermes runs the command again after an exception, or reports exit 124 when its text says timeout"
    )


LATE_S = 10.0  # how long a wait the host abandoned may take to end on its own


class _Workers:
    """The host's deadline workers (``deadline-*`` threads) started while a command ran."""

    def __init__(self) -> None:
        self.before = set(threading.enumerate())
        self.started: list[threading.Thread] = []

    def stuck(self, within_s: float) -> list[threading.Thread]:
        """The workers still blocked in the backend after waiting up to ``within_s`` for them."""
        ends = time.monotonic() + within_s
        for worker in self.started:
            worker.join(max(0.0, ends - time.monotonic()))
        return [w for w in self.started if w.is_alive()]


@contextlib.contextmanager
def _host_backstop() -> Iterator[_Workers]:
    """Watch the host's own deadline while a command runs.

    Current hosts wait for a command on a worker thread bounded a little past
    its timeout; when that bound passes they return 124 and abandon the
    worker, still blocked in the backend with its connection open.  A backend
    that ends its own wait, even late, frees the worker; one that never does
    leaks a blocked thread and a connection per command.
    """
    workers = _Workers()
    try:
        yield workers
    finally:
        workers.started = [
            t for t in threading.enumerate() if t not in workers.before and t.name.startswith("deadline-")
        ]


def _ended_by_backend(workers: _Workers, fault: str) -> None:
    stuck = workers.stuck(LATE_S)
    assert not stuck, (
        f"{fault} and the backend never ended its wait: {LATE_S:.0f}s after the host's deadline gave up on "
        f"execute() ({stuck[0].name}), the call is still blocked in the backend, holding a worker and a "
        "connection; bound every wait on the service by the command's timeout"
    )


def _once(
    kit: Any,
    env: Any,
    record: Record,
    outcome: TerminalOutcome,
    fault: str,
    faults: Any,
    armed: Armed,
    *,
    expect: int = 1,
    at_most: bool = False,
) -> None:
    """The command ran ``expect`` times (once when the fault let it start, never when it did not).

    ``at_most``: fewer runs are fine too (the service may stop a command whose client gave up on its
    reply before the command got far); only a run beyond ``expect`` fails.  Fewer runs than expected
    after a fault the injector applied blind (it cannot see where a command starts) mean the fault
    met the connection before the command: no verdict.
    """
    count = count_runs(kit, env, record, expect=expect)
    if count.runs == expect or (at_most and count.runs < expect):
        return
    blind = faults.before_command(armed)
    if count.runs < expect and blind and not count.gone:
        unverified(f"{fault}, and the command never started: {blind}")
    if count.runs < expect:
        raise AssertionError(
            f"{fault}; the command's record shows {count.runs} run(s), expected {expect}"
            f"{count.explain()}; {describe(outcome)}"
        )
    again = "Hermes's terminal tool sent it again after execute() raised" if outcome.raised else "it was sent again"
    raise AssertionError(
        f"{fault} and the command's record shows {count.runs} run(s), expected {'at most ' if at_most else ''}"
        f"{expect}: {again}; {describe(outcome)}"
    )


# ------------------------------------------------------------------ dropped connection
@pytest.mark.clause("faults.dropped-mid-command")
def test_dropped_connection_fails_cleanly_and_is_not_retried(kit, env, faults):
    _warm(env)
    # 4 KiB of output before the pause: a fault cutting in after 2 KiB lands while the command runs.
    command, record = counting(
        kit, env, "drop", f"head -c 4096 /dev/zero | tr '\\0' s; echo; sleep 1; echo finished; exit {EXIT}"
    )
    armed = faults.arm("drop", "exec", after_bytes=2048)
    outcome = drive(env, command, timeout=10)
    faults.clear()
    fault = _fired(faults, armed, "the connection was dropped mid-command")
    _once(kit, env, record, outcome, fault, faults, armed)
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
    if armed.fired == 0:
        not_applicable("the backend made no call on the service's create route")
    assert isinstance(result, dict) and rc(result) == 0 and "up" in out(result), (
        f"create was answered 429 {armed.fired} time(s) (then accepted) and the first command {_describe(result)}; "
        "a rate limit must be retried"
    )
    tries = faults.attempts("create", since=since)
    assert len(tries) >= 2 and tries[1] - tries[0] >= 0.05, (
        f"the backend came back {tries[1] - tries[0]:.3f}s after a 429; a retry needs a backoff"
        if len(tries) >= 2
        else "the backend retried a 429 once at most"
    )
    faults.clear()

    armed = faults.arm("status", "create", status=429, times=-1, message="Too many requests: rate limit exceeded")
    started = time.monotonic()
    outcome = _outcome(Call(lambda: run(make_env(), "echo up")), 60, "creating against a permanent 429")
    faults.clear()
    if armed.fired == 0:
        unverified("the permanent 429 on create never fired, although the backend's creates met the first one")
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
    command, record = counting(kit, env, "5xx", f"echo ran; exit {EXIT}")
    armed = faults.arm("status", "exec", status=500, message="Internal server error")
    outcome = drive(env, command, timeout=10)
    faults.clear()
    fault = _fired(faults, armed, "the command call was answered 500 (the service ran nothing)")
    _once(kit, env, record, outcome, fault, faults, armed, expect=0)
    _no_raise(outcome, fault)
    assert outcome.exit_code != 0, f"{fault} and {describe(outcome)}"


# ------------------------------------------------------------------ silence, half-close
def _held_connection(kit: Any, env: Any, faults: Any, kind: str, body: str, fault: str, *, expect: int) -> None:
    """A command whose connection the service holds open without answering (``kind``), with timeout=2.

    The backend must end its own wait (judged before the fault is cleared:
    clearing may release the held call), return a non-zero result without
    raising, and leave the command with ``expect`` runs.
    """
    _warm(env)
    command, record = counting(kit, env, kind, f"{body}; exit {EXIT}")
    armed = faults.arm(kind, "exec")
    with _host_backstop() as workers:
        outcome = drive(env, command, timeout=2)
    try:
        fault = _fired(faults, armed, fault)
        _ended_by_backend(workers, fault)
    finally:
        faults.clear()
    _once(kit, env, record, outcome, fault, faults, armed, expect=expect)
    _no_raise(outcome, fault)
    assert outcome.exit_code != 0, f"{fault} and {describe(outcome)}"


@pytest.mark.clause("faults.silent-server")
def test_silent_server_cannot_outlast_the_timeout(kit, env, faults):
    _held_connection(
        kit,
        env,
        faults,
        "silence",
        "echo never",
        "the service accepted the command call and never answered (it ran nothing)",
        expect=0,
    )


@pytest.mark.clause("faults.half-closed")
def test_half_closed_connection_cannot_outlast_the_timeout(kit, env, faults):
    _held_connection(
        kit,
        env,
        faults,
        "half-close",
        "echo half; sleep 30",
        "the service stopped sending on the command's connection and kept it open",
        expect=1,
    )


# ------------------------------------------------------------------ damaged frames
@pytest.mark.clause("faults.damaged-frame")
@pytest.mark.parametrize("kind", ["garbage", "truncate"])
def test_damaged_frame_never_becomes_a_wrong_exit_code(kit, env, faults, kind):
    _warm(env)
    # The service damages the reply of a command it started.
    command, record = counting(kit, env, kind, f"echo damaged-{kind}; exit {EXIT}")
    armed = faults.arm(kind, "exec")
    outcome = drive(env, command, timeout=10)
    faults.clear()
    fault = _fired(faults, armed, f"the command's reply carried a {kind} frame")
    # A backend that gives up on the reply may close it before the command got far: once at most.
    _once(kit, env, record, outcome, fault, faults, armed, at_most=True)
    _no_raise(outcome, fault)
    assert outcome.exit_code != 0, (
        f"{fault} and {describe(outcome)}; the command exits {EXIT}, so a damaged reply read as success"
    )
    if outcome.exit_code != EXIT:
        assert outcome.output.strip() not in ("", f"damaged-{kind}"), (
            f"{fault} and {describe(outcome)}: an infrastructure failure needs a message saying what failed"
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

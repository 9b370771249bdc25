"""output: what execute() captures, how much of it, and in which order."""

from __future__ import annotations

import re
import shlex
import time

import pytest

from conformance.checks._support import out, rc, run, sha256_hex
from conformance.host.calls import Call

pytestmark = pytest.mark.usefixtures("kit")

NOTICE = re.compile(r"\n*\.\.\. \[OUTPUT TRUNCATED[^\]\n]*\] \.\.\.\n*")


def _host_max_chars() -> int:
    """tool_output.max_bytes of the active host (the bounded-capture window)."""
    try:
        # Current hermes-agent only: the stand-ins have no tool_output_limits, so mypy finds no module.
        from tools.tool_output_limits import get_max_bytes  # type: ignore[import-not-found]

        return int(get_max_bytes())
    except Exception:
        pass
    try:
        from tools.environments.base_output import DEFAULT_MAX_OUTPUT_CHARS

        return int(DEFAULT_MAX_OUTPUT_CHARS)
    except Exception:
        return 50_000


def _seq_w(last: int) -> str:
    """What `seq -w 1 <last>` prints."""
    line = f"%0{len(str(last))}d\n"
    return "".join(map(line.__mod__, range(1, last + 1)))


@pytest.mark.clause("output.bounded")
def test_bounded_capture_keeps_a_window(env):
    limit = _host_max_chars()
    last = 99_999
    while 6 * last < 3 * limit:
        last = last * 10 + 9
    command = f"seq -w 1 {last}"
    expected = _seq_w(last)

    full = out(run(env, command, bounded_capture=False))
    if full != expected:
        i = next(
            (k for k, (a, b) in enumerate(zip(full, expected, strict=False)) if a != b), min(len(full), len(expected))
        )
        raise AssertionError(
            f"bounded_capture=False returned {len(full)} of {len(expected)} chars, "
            f"first difference at {i}: {full[i : i + 40]!r} vs {expected[i : i + 40]!r}"
        )

    bounded = out(run(env, command, bounded_capture=True))
    notice = NOTICE.search(bounded)
    if notice is None:
        # A backend may leave capping to the host; then it must return everything.
        assert bounded == expected, (
            f"bounded_capture=True returned {len(bounded)} of {len(expected)} chars with no '[OUTPUT TRUNCATED' notice"
        )
        return
    kept = len(bounded) - len(notice.group(0))
    assert kept <= limit, f"bounded capture kept {kept} chars besides the notice; the host's max is {limit}"
    head, tail = bounded[: notice.start()], bounded[notice.end() :]
    assert head and expected.startswith(head), f"the bounded head is not the start of the output: {head[:80]!r}"
    assert tail and expected.endswith(tail), f"the bounded tail is not the end of the output: {tail[-80:]!r}"


@pytest.mark.clause("output.full-fidelity")
def test_eight_mib_of_output_in_full(env):
    last = 1 << 20  # `seq -w 1 1048576`: 8-byte lines, 8 MiB exactly
    expected = _seq_w(last)
    assert len(expected) == 8 * 1024 * 1024
    result = run(env, f"seq -w 1 {last}", timeout=60, bounded_capture=False)
    text = out(result)
    assert rc(result) == 0, f"seq of 8 MiB exited {rc(result)}: {text[-200:]!r}"
    assert len(text) == len(expected), f"8 MiB of output came back as {len(text)} chars"
    assert sha256_hex(text.encode()) == sha256_hex(expected.encode()), (
        "8 MiB of output came back with the right length but different content or order"
    )


BACKGROUND = ("{child} &", "{child} & disown", "true && {child} &")


@pytest.mark.clause("output.background-child-returns")
def test_background_child_does_not_hold_the_call(make_env):
    def one(env, form: str) -> None:
        made = run(env, 'mktemp -d "${TMPDIR:-/tmp}/kit-bg.XXXXXX"', cwd="/")
        assert rc(made) == 0 and out(made).strip(), f"mktemp -d failed: {out(made)!r}"
        pid_file = shlex.quote(out(made).strip() + "/pid")
        child = f"sh -c 'echo $$ > \"$1\"; exec sleep 20' kit-bg {pid_file}"  # holds the call's stdout open
        command = form.format(child=child)
        started = time.monotonic()
        try:
            result = run(env, command, timeout=30)
            elapsed = time.monotonic() - started
            assert elapsed < 3, f"{command!r} held the call open for {elapsed:.1f}s (a background child owns stdout)"
            assert rc(result) == 0, f"{command!r} returned {rc(result)}: {out(result)!r}"
        finally:
            run(
                env,
                f"for i in 1 2 3 4 5; do [ -s {pid_file} ] && break; sleep 0.1; done; "
                f'p=$(cat {pid_file} 2>/dev/null); [ -n "$p" ] && kill "$p" 2>/dev/null; true',
                cwd="/",
                timeout=10,
            )

    # The three forms run at once, each in its own environment.
    calls = [Call(one, make_env(), form) for form in BACKGROUND]
    for form, call in zip(BACKGROUND, calls, strict=True):
        call.result(60, what=f"the {form!r} scenario")


EXACT = (
    ("printf abc", "abc"),
    ("printf ''", ""),
    ("printf 'a\\nb'", "a\nb"),
    ("printf 'cr\\r'", "cr\r"),
    ("printf 'x\\n'", "x\n"),
    ("printf 'two\\n\\n'", "two\n\n"),
)


@pytest.mark.clause("output.no-trailing-newline")
def test_output_is_returned_exactly(env):
    for command, expected in EXACT:
        for bounded in (False, True):
            got = out(run(env, command, bounded_capture=bounded))
            assert got == expected, (
                f"execute({command!r}, bounded_capture={bounded}) returned {got!r}, not {expected!r}"
            )


@pytest.mark.clause("output.order")
def test_stdout_and_stderr_keep_arrival_order(env):
    command = "for i in 1 2 3; do echo out$i; sleep 0.05; echo err$i >&2; sleep 0.05; done"
    lines = out(run(env, command)).split()
    expected = ["out1", "err1", "out2", "err2", "out3", "err3"]
    assert lines == expected, f"stdout/stderr lines written alternately came back as {lines}"

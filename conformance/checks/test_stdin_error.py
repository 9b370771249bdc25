"""stdin: stdin_data that has no byte form is reported as a failed write.

Hermes's own pipe writer encodes stdin_data with surrogateescape; a lone
surrogate outside U+DC80-U+DCFF cannot be encoded, so it sends nothing,
closes stdin, and the wait loop returns stdin_error.  File tools read that
key: without it (and with returncode 0) a write that never happened looks
done.
"""

from __future__ import annotations

import pytest

from conformance.checks._support import nonce, out, rc, run
from conformance.host.calls import CallHung

pytestmark = pytest.mark.usefixtures("kit")


@pytest.mark.clause("stdin.error-reported")
def test_stdin_without_a_byte_form_is_reported(env):
    mark = nonce("after")
    try:
        result = run(env, f"cat > /dev/null; echo {mark}", stdin_data="text before \ud800 and after", timeout=10)
    except CallHung:
        raise
    except Exception as exc:
        pytest.fail(
            f"execute() raised {type(exc).__name__} for stdin_data holding U+D800 ({exc}); "
            "return a result with stdin_error instead (Hermes re-runs a command whose execute() raised)"
        )
    assert mark in out(result), (
        f"after stdin_data it could not send, the command did not finish (returncode {rc(result)}): "
        f"stdin must still be closed so the command sees end of file; output {out(result)[-200:]!r}"
    )
    error = result.get("stdin_error")
    if error is not None:
        assert isinstance(error, str) and error.strip(), f"stdin_error must be a non-empty str, got {error!r}"
        return
    assert rc(result) != 0, (
        f"stdin_data holding U+D800 could not be sent, yet the result is a clean success (returncode 0, "
        f"no stdin_error): a file tool would report a write that did not happen; output {out(result)[-200:]!r}"
    )

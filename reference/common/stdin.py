"""stdin_data to bytes the way Hermes's own pipe writer does it.

A str carries undecodable input bytes as surrogates U+DC80..U+DCFF
(surrogateescape), which turn back into those bytes.  Any other lone surrogate
(a literal U+D800, say) has no byte form: Hermes then sends no stdin at all,
closes it so the command sees EOF, and reports the error as the result's
``stdin_error`` (file tools read that as a failed write).  A backend reports it
by leaving the error on its process handle as ``_hermes_stdin_errors``, which
the host's wait loop turns into that key.
"""

from __future__ import annotations

from typing import Any


def encode_stdin(data: str | None) -> tuple[bytes | None, BaseException | None]:
    """(bytes to send, None), or (b"", the error) when ``data`` has no byte form."""
    if data is None:
        return None, None
    try:
        return data.encode("utf-8", "surrogateescape"), None
    except UnicodeEncodeError as exc:
        return b"", exc


def report_stdin_error(handle: Any, error: BaseException | None) -> Any:
    """Leave ``error`` on ``handle`` where the host's wait loop reads stdin failures; return the handle."""
    if error is not None:
        try:
            handle._hermes_stdin_errors = [error]
        except AttributeError:
            pass
    return handle

"""stdin_data to bytes as Hermes's pipe writer does, and the error left on the handle."""

from __future__ import annotations

from types import SimpleNamespace

from reference.common.stdin import encode_stdin, report_stdin_error


def test_text_and_escaped_bytes_encode_exactly():
    raw = b"caf\xc3\xa9 \xff\xfe end"
    assert encode_stdin(raw.decode("utf-8", "surrogateescape")) == (raw, None)
    assert encode_stdin(None) == (None, None)


def test_a_lone_surrogate_sends_nothing_and_is_reported():
    payload, error = encode_stdin("before \ud800 after")
    assert payload == b"" and isinstance(error, UnicodeEncodeError)
    handle = report_stdin_error(SimpleNamespace(), error)
    assert handle._hermes_stdin_errors == [error]


def test_no_error_leaves_the_handle_alone():
    handle = report_stdin_error(SimpleNamespace(), None)
    assert not hasattr(handle, "_hermes_stdin_errors")

"""Bridge protocol v1 limits at and over each boundary: the command, stdin, the body, the output."""

from __future__ import annotations

import pytest

from fakes.cloudflare.settings import (
    MAX_COMMAND_BYTES,
    MAX_OUTPUT_UNITS,
    MAX_STDIN_BYTES,
)

from .bridge_client import (
    Client,
    error_of,
    rid,
)


def test_command_limit_is_64_kib_of_utf8(client: Client, sid: str) -> None:
    at = ": " + "x" * (MAX_COMMAND_BYTES - 2)
    assert client.exec(sid, at).exit_code == 0
    over = at + "x"
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": over})) == (
        400,
        "invalid_field",
    )
    multibyte = ": " + "é" * ((MAX_COMMAND_BYTES - 2) // 2)  # 65,536 bytes, 32,769 characters
    assert client.exec(sid, multibyte).exit_code == 0
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": multibyte + "é"})) == (
        400,
        "invalid_field",
    )


def test_empty_command_is_allowed(client: Client, sid: str) -> None:
    assert client.exec(sid, "").exit_code == 0


def test_stdin_limit_is_768_kib_of_utf8(client: Client, sid: str) -> None:
    assert client.exec(sid, "wc -c", stdin="s" * MAX_STDIN_BYTES, timeout=10).output.strip() == str(MAX_STDIN_BYTES)
    assert client.exec(sid, "wc -c", stdin="é" * (MAX_STDIN_BYTES // 2), timeout=10).output.strip() == str(
        MAX_STDIN_BYTES
    )
    for over in ("s" * (MAX_STDIN_BYTES + 1), "é" * (MAX_STDIN_BYTES // 2) + "s"):
        resp = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": "wc -c", "stdin": over})
        assert error_of(resp) == (400, "invalid_field")


def test_an_exec_body_over_1_mib_is_413_even_with_stdin_in_bounds(client: Client, sid: str) -> None:
    # 700,000 control characters are within the stdin limit but JSON-escape to 4.2 MB.
    resp = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": "true", "stdin": "\x01" * 700_000})
    assert error_of(resp) == (413, "payload_too_large")


def test_output_at_the_limit_is_delivered_whole(client: Client, sid: str) -> None:
    run = client.exec(sid, f"head -c {MAX_OUTPUT_UNITS} /dev/zero | tr '\\0' a")
    assert run.exit_code == 0
    assert len(run.output) == MAX_OUTPUT_UNITS and set(run.output) == {"a"}


def test_output_over_the_limit_is_an_error_never_a_truncated_success(client: Client, sid: str) -> None:
    run = client.exec(sid, f"head -c {MAX_OUTPUT_UNITS + 1} /dev/zero | tr '\\0' a; echo never")
    assert run.types[-1] == "error" and run.error_code == "output_limit"
    assert "exit" not in run.types
    assert len(run.output) <= MAX_OUTPUT_UNITS
    # the workspace is free again and the flood's process group was stopped
    assert client.exec(sid, "echo next").output == "next\n"


def test_output_limit_counts_utf16_units(client: Client, sid: str) -> None:
    lines = (MAX_OUTPUT_UNITS - 2) // 3  # "😀\n" is 3 UTF-16 units in 2 code points
    at = client.exec(sid, f"yes '😀' | head -n {lines}; printf ab")
    assert at.exit_code == 0
    assert len(at.output) == lines * 2 + 2  # far fewer than 2,000,000 code points...
    over = client.exec(sid, f"yes '😀' | head -n {lines}; printf abc")
    assert over.error_code == "output_limit"  # ... yet one unit more is over the limit


def _message(resp) -> str:  # type: ignore[no-untyped-def]
    return str(resp.json()["error"]["message"])


def test_deeply_nested_json_is_invalid_json_that_says_so(client: Client, sid: str) -> None:
    for depth in (100_000, 65):
        deep = b'{"request_id":"' + rid().encode() + b'","command":"true","x":' + b"[" * depth + b"]" * depth + b"}"
        resp = client.http.post(f"/v1/sandboxes/{sid}/exec", content=deep, headers={"Content-Type": "application/json"})
        assert error_of(resp) == (400, "invalid_json") and "nest" in _message(resp), resp.text


@pytest.mark.parametrize("field, value", [("command", "echo a\0b"), ("stdin", "a\0b")])
def test_a_nul_byte_in_a_command_or_stdin_is_invalid_and_named(
    client: Client, sid: str, field: str, value: str
) -> None:
    body = {"request_id": rid(), "command": "cat", field: value}
    resp = client.post(f"/v1/sandboxes/{sid}/exec", body)
    assert error_of(resp) == (400, "invalid_field") and "NUL" in _message(resp) and field in _message(resp)


def test_a_nul_byte_in_a_path_or_cwd_is_invalid_and_named(client: Client, sid: str) -> None:
    resp = client.post(f"/v1/sandboxes/{sid}/read", {"path": "/workspace/a\0b"})
    assert error_of(resp) == (400, "invalid_field") and "NUL" in _message(resp)
    resp = client.init("nul-cwd", cwd="/workspace/a\0b")
    assert error_of(resp) == (400, "invalid_field") and "NUL" in _message(resp)

"""The bridge router: unknown routes, ids and query strings, methods, content types, JSON bodies and unknown fields."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from fakes.cloudflare import BridgeServer
from fakes.cloudflare.settings import (
    MAX_BODY_BYTES,
)

from .bridge_client import (
    Client,
    error_of,
    new_id,
    rid,
)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/v1",
        "/v1/sandboxes",
        "/v1/sandboxes/",
        "/v2/sandboxes/abc",
        "/v1/sandboxes/abc/unknown",
        "/v1/sandboxes/abc/exec/more",
        "/v1/sandboxes/abc/cancel",
        "/v1/sandboxes/abc/cancel/xyz",
        "/v1/sandboxes/abc/cancel/" + "A" * 32,
        "/v1/sandboxes/abc/cancel/" + "a" * 31,
        # bad sandbox ids
        "/v1/sandboxes/A!",
        "/v1/sandboxes/-abc",
        "/v1/sandboxes/Abc",
        "/v1/sandboxes/a_b",
        "/v1/sandboxes/" + "a" * 64,
        "/v1/sandboxes/a%62c",
        # any query string
        "/v1/sandboxes/abc?x=1",
        "/v1/sandboxes/abc/exec?a",
        "/v1/sandboxes/abc/release?=",
    ],
)
def test_unknown_routes_ids_and_query_strings_are_404(client: Client, path: str) -> None:
    resp = client.http.request("POST", path, json={"persistent": True})
    assert error_of(resp) == (404, "not_found"), path


def test_health_ignores_a_query_string(client: Client) -> None:
    # As in the Worker: /health is matched on the path alone.
    assert client.http.get("/health?probe=1").json() == {"ok": True, "protocol": 1}


def test_query_string_on_a_status_route_is_404(client: Client, sid: str) -> None:
    assert error_of(client.http.get(f"/v1/sandboxes/{sid}", params={"a": "b"})) == (404, "not_found")
    assert client.status(sid).status_code == 200


def test_longest_valid_id_is_routed(client: Client) -> None:
    longest = "a" + "-" * 61 + "z"
    assert error_of(client.status(longest)) == (404, "workspace_missing")
    assert client.init(longest).status_code == 200


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/v1/sandboxes/abc/exec"),
        ("GET", "/v1/sandboxes/abc/release"),
        ("DELETE", "/v1/sandboxes/abc/exec"),
        ("PUT", "/v1/sandboxes/abc"),
        ("PATCH", "/v1/sandboxes/abc"),
        ("HEAD", "/v1/sandboxes/abc/checkpoint"),
        ("GET", "/v1/sandboxes/abc/cancel/" + "a" * 32),
        ("PUT", "/v1/sandboxes/abc/read"),
    ],
)
def test_wrong_methods_are_405(client: Client, method: str, path: str) -> None:
    resp = client.http.request(method, path)
    assert resp.status_code == 405
    if method != "HEAD":
        assert error_of(resp) == (405, "method_not_allowed")


def test_health_is_get_only(client: Client) -> None:
    assert error_of(client.post("/health")) == (404, "not_found")


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "Application/JSON"])
def test_non_json_bodies_are_415(client: Client, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    for path in ("/v1/sandboxes/abc", "/v1/sandboxes/abc/release", "/v1/sandboxes/abc/cancel/" + "a" * 32):
        resp = client.http.post(path, content=b'{"persistent":true}', headers=headers)
        assert error_of(resp) == (415, "content_type"), (path, content_type)


def test_json_content_type_with_parameters_is_accepted(client: Client) -> None:
    resp = client.http.post(
        f"/v1/sandboxes/{new_id()}",
        content=b'{"persistent":true}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert resp.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b"1",
        b'"s"',
        b"null",
        b'{"persistent":NaN}',
        b'{"persistent":true,"cwd":"\xff"}',
        b'{"persistent":true',
    ],
)
def test_invalid_json_is_400(client: Client, body: bytes) -> None:
    resp = client.http.post(f"/v1/sandboxes/{new_id()}", content=body, headers={"Content-Type": "application/json"})
    assert error_of(resp) == (400, "invalid_json")


def test_a_byte_order_mark_is_allowed(client: Client) -> None:
    resp = client.http.post(
        f"/v1/sandboxes/{new_id()}",
        content=b'\xef\xbb\xbf{"persistent":false}',
        headers={"Content-Type": "application/json"},
    )
    assert resp.status_code == 200


def _raw_request(server: BridgeServer, head: str, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
        return data


def test_declared_body_over_1_mib_is_413_unread(server: BridgeServer) -> None:
    head = (
        f"POST /v1/sandboxes/abc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    )
    answer = _raw_request(server, head)  # no body is ever sent
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_actual_body_over_1_mib_without_length_is_413(client: Client) -> None:
    data = b'{"persistent":true}' + b" " * (MAX_BODY_BYTES + 1 - 19)
    assert len(data) == MAX_BODY_BYTES + 1

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(data), 65536):
            yield data[i : i + 65536]

    resp = client.http.post(f"/v1/sandboxes/{new_id()}", content=chunks(), headers={"Content-Type": "application/json"})
    assert error_of(resp) == (413, "payload_too_large")


def test_body_of_exactly_1_mib_is_accepted(client: Client) -> None:
    data = b'{"persistent":true}' + b" " * (MAX_BODY_BYTES - 19)
    resp = client.http.post(f"/v1/sandboxes/{new_id()}", content=data, headers={"Content-Type": "application/json"})
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize(
    "path,body",
    [
        ("", {"persistent": True, "size": "big"}),
        ("/exec", {"request_id": "a" * 32, "command": "true", "env": {"TOKEN": "x"}}),
        ("/read", {"path": "/etc/hostname", "offset": 1}),
    ],
)
def test_unknown_fields_are_refused(client: Client, path: str, body: dict[str, Any]) -> None:
    resp = client.post(f"/v1/sandboxes/{new_id()}{path}", body)
    assert error_of(resp) == (400, "unknown_field")


def test_release_and_cancel_ignore_extra_fields(client: Client, sid: str) -> None:
    assert client.post(f"/v1/sandboxes/{sid}/cancel/{rid()}", {"why": 1}).json() == {"ok": True}
    assert client.post(f"/v1/sandboxes/{sid}/release", {"why": 1}).json() == {"ok": True}


@pytest.mark.parametrize(
    "config",
    [
        {"persistent": "true"},
        {"persistent": None},
        {},
        {"persistent": 1},
        {"persistent": True, "cwd": "relative"},
        {"persistent": True, "cwd": ""},
        {"persistent": True, "cwd": "/a\u0000b"},
        {"persistent": True, "cwd": "/" + "a" * 4096},
        {"persistent": True, "image": "bad name"},
        {"persistent": True, "image": "a" * 129},
        {"persistent": True, "image": ""},
        {"persistent": True, "instance": 3},
        {"persistent": True, "instance": "x" * 33},
    ],
)
def test_init_field_validation(client: Client, config: dict[str, Any]) -> None:
    assert error_of(client.post(f"/v1/sandboxes/{new_id()}", config)) == (400, "invalid_field")


@pytest.mark.parametrize(
    "change",
    [
        {"request_id": "A" * 32},
        {"request_id": "a" * 31},
        {"request_id": "a" * 33},
        {"request_id": None},
        {"request_id": "../../" + "a" * 26},
        {"command": None},
        {"command": 5},
        {"command": "echo \u0000"},
        {"login": "true"},
        {"login": 1},
        {"stdin": 5},
        {"stdin": "a\u0000"},
    ],
)
def test_exec_field_validation(client: Client, sid: str, change: dict[str, Any]) -> None:
    body = {"request_id": rid(), "command": "true", **change}
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", body)) == (400, "invalid_field")


@pytest.mark.parametrize("timeout", [0, 0.099, 900.001, -1, "10", True, 1e400, [1]])
def test_exec_timeout_out_of_range_is_invalid_timeout(client: Client, sid: str, timeout: Any) -> None:
    body = json.dumps({"request_id": rid(), "command": "true", "timeout": timeout}).replace("Infinity", "1e400")
    resp = client.http.post(f"/v1/sandboxes/{sid}/exec", content=body, headers={"Content-Type": "application/json"})
    assert error_of(resp) == (400, "invalid_timeout")


@pytest.mark.parametrize("timeout", [0.1, 900, None, 1])
def test_exec_timeout_at_the_bounds_is_accepted(client: Client, sid: str, timeout: Any) -> None:
    run = client.exec(sid, "true", timeout=timeout)
    assert run.status == 200 and run.exit_code in (0, 124)  # a loaded machine may need over 0.1 s

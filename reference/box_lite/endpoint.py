"""A box's workload endpoint as the host knows it: its bearer token and its forwarded host port.

- The token is made when the box is made (``hermes-box new``, ``load``): 32 random
  bytes, URL-safe, in ``BOX_DIR/endpoint-token`` (mode 0600, in the box's 0700
  directory, outside /data: no backup carries it, and no path in the box shows it).
  The box's daemon hands it to the workload (``HERMES_BOX_TOKEN``) and to ``hb``
  (``hb wire-mcp``, ``hb doctor``); the host puts it in the runtime manifest (0600).
  It is never printed or logged.
- The host port is taken, with ``EXPOSE_EXECUTOR_WEB=on`` and a ``WORKLOAD``, from
  ``EXECUTOR_PORT_LO..HI`` when the box is made or repaired: the lowest port no other
  box of the home holds and nothing listens on now, chosen under a lock of the home so
  two commands never pick the same one, and recorded in box.json (``endpoint``).
  The box's daemon listens there on 127.0.0.1 only (see ``relay``).

This module imports only the standard library and the box manager's stdlib modules:
the daemon uses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
from pathlib import Path
from typing import Any

from reference.box_lite.errors import BoxError
from reference.box_lite.paths import BoxDir, BoxHome
from reference.box_lite.records import json_bytes, publish_atomic, read_object

TOKEN_FILE = "endpoint-token"
QUERY = "hermes_box_token"  # the URL parameter `open` puts the token in


def cookie_name(port: int) -> str:
    """The relay's cookie, set when a browser brings the token in the URL.  Browsers keep cookies
    per host, not per port: each box's endpoint has a cookie of its own name, so opening one box
    never replaces another's."""
    return f"hermes_box_token_{port}"


def token_path(box: BoxDir) -> Path:
    return box.root / TOKEN_FILE


def read_token(box: BoxDir) -> str | None:
    try:
        text = token_path(box).read_text().strip()
    except OSError:
        return None
    return text or None


def ensure_token(box: BoxDir) -> str:
    """The box's token, made (0600) when it has none."""
    token = read_token(box)
    if token is not None:
        return token
    token = secrets.token_urlsafe(32)
    path = token_path(box)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)
    return token


def host_port(record: dict[str, Any] | None) -> int | None:
    """The forwarded host port box.json records, None when the box has none."""
    endpoint = (record or {}).get("endpoint")
    port = endpoint.get("host_port") if isinstance(endpoint, dict) else None
    return port if isinstance(port, int) and 0 < port < 65536 else None


def host_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/"


def secret_url(port: int, token: str) -> str:
    """What `open` gives the browser: the relay trades the parameter for a cookie at once."""
    return f"http://127.0.0.1:{port}/?{QUERY}={token}"


def _free_now(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def assign_port(home: BoxHome, name: str, low: int, high: int) -> int:
    """Record a forwarded host port for box ``name`` (kept if it has one) and return it."""
    box = home.box(name)
    lock_path = home.config_dir / ".ports.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        record = read_object(box.record)
        if record is None:
            raise BoxError(f"cannot read {box.record}", "box.json is missing or damaged", f"hermes-box repair {name}")
        own = host_port(record)
        if own is not None and low <= own <= high:
            return own
        taken = set()
        if home.boxes_dir.is_dir():
            for entry in home.boxes_dir.iterdir():
                if entry.name != name:
                    with contextlib.suppress(OSError):
                        port = host_port(read_object(entry / "box.json"))
                        if port is not None:
                            taken.add(port)
        for port in range(low, high + 1):
            if port not in taken and _free_now(port):
                record["endpoint"] = {"host_port": port}
                publish_atomic(box.record, json_bytes(record))
                return port
        raise BoxError(
            f"no free host port for box {name}'s endpoint",
            f"every port of EXECUTOR_PORT_LO..HI ({low}..{high}) is another box's or in use",
            "widen EXECUTOR_PORT_LO..EXECUTOR_PORT_HI in box.env, or remove a box, then hermes-box repair " + name,
        )
    finally:
        os.close(fd)


def endpoints(home: BoxHome) -> dict[str, dict[str, str]]:
    """Every box's forwarded endpoint with its token: what the runtime manifest (0600) records."""
    found: dict[str, dict[str, str]] = {}
    if not home.boxes_dir.is_dir():
        return found
    for entry in sorted(home.boxes_dir.iterdir()):
        box = BoxDir(entry)
        port = host_port(read_object(box.record))
        token = read_token(box)
        if port is not None and token is not None:
            found[entry.name] = {"url": host_url(port), "token": token}
    return found

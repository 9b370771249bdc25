"""A control channel to an object in another process: attribute reads and method calls over loopback HTTP.

A fake's own process serves its world adapter with ``ControlServer``; the kit
holds a ``RemoteObject`` with the same public interface, so checks call
``kit.world.pause(id)`` or ``kit.world.faults.arm(...)`` unchanged.  The
channel knows nothing of any vendor: it forwards a method name and its
arguments to whatever object it serves.

- Only public names cross (no leading underscore).
- Values cross as JSON, with tuples, sets, bytes and paths tagged so they
  come back as the same types.  Any other object (a FaultScript, an Armed)
  stays in the serving process and crosses as a reference: reading an
  attribute of a reference (``armed.fired``) asks the serving process each
  time, so it is always the live value.
- An exception raised in the serving process is raised in the caller as the
  same builtin class with the same arguments (a KeyError stays a KeyError),
  with a note naming the process; any other class becomes ``RemoteError``.
- Every request carries the channel's random bearer token; the server
  listens on 127.0.0.1 only.

The address is one URL, ``http://kit:TOKEN@127.0.0.1:PORT``, which is what
``hermes-backend-kit fake serve`` prints and ``--fake-control`` takes.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import http.client
import json
import logging
import os
import secrets
import socket
import threading
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger("fakes.control")

PATH = "/v1/call"
ADDRESS_FORM = "http://kit:TOKEN@127.0.0.1:PORT"
MAX_REQUEST_BYTES = 16 * 1024 * 1024


class ControlError(RuntimeError):
    """The control channel itself failed: bad address, refused token, or the serving process is gone."""


class RemoteError(RuntimeError):
    """An exception of a non-builtin class raised by the object on the other side of the channel."""

    def __init__(self, remote_type: str, message: str, remote_traceback: str = ""):
        super().__init__(f"{remote_type}: {message}")
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


class ControlBusy(ControlError):
    """The fake already serves another run (the lease is held by another live process)."""


# ------------------------------------------------------------------ values
def _public_methods(obj: Any) -> list[str]:
    kind = type(obj)
    names = []
    for name in dir(kind):
        if name.startswith("_"):
            continue
        try:
            attr = getattr(kind, name)
        except AttributeError:
            continue
        if callable(attr) and not isinstance(attr, type):
            names.append(name)
    return sorted(names)


def _encode(value: Any, register: Callable[[Any], dict[str, Any]]) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_encode(v, register) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, register) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {"$set": [_encode(v, register) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _encode(v, register) for k, v in value.items()}
        return {"$dict": [[_encode(k, register), _encode(v, register)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, PurePath):
        return {"$path": str(value)}
    return register(value)


def _decode(value: Any, resolve: Callable[[dict[str, Any]], Any]) -> Any:
    if isinstance(value, list):
        return [_decode(v, resolve) for v in value]
    if not isinstance(value, dict):
        return value
    if "$ref" in value:
        return resolve(value)
    if "$tuple" in value:
        return tuple(_decode(v, resolve) for v in value["$tuple"])
    if "$set" in value:
        return frozenset(_decode(v, resolve) for v in value["$set"])
    if "$dict" in value:
        return {_decode(k, resolve): _decode(v, resolve) for k, v in value["$dict"]}
    if "$bytes" in value:
        return base64.b64decode(value["$bytes"])
    if "$path" in value:
        return Path(value["$path"])
    return {k: _decode(v, resolve) for k, v in value.items()}


def _json_args(exc: BaseException) -> list[Any] | None:
    try:
        json.dumps(exc.args)
    except (TypeError, ValueError):
        return None
    return list(exc.args)


def _builtin_exception(name: str) -> type[Exception] | None:
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    return None


# ------------------------------------------------------------------ server
class ControlServer:
    """Serves ``root`` (and what its methods return) to holders of the token, on 127.0.0.1.

    ``info`` is plain data handed to every client that says hello (what the
    fake exports, its name, ...).  ``lease``/``release`` let one client
    process at a time claim the served object: a fake started by hand serves
    one suite run at a time.
    """

    def __init__(self, root: Any, *, info: dict[str, Any] | None = None, port: int = 0):
        self.token = secrets.token_urlsafe(32)
        self.info = dict(info or {})
        self._objects: dict[int, Any] = {0: root}
        self._ids: dict[int, int] = {id(root): 0}
        self._lock = threading.Lock()
        self._holder: int | None = None
        self._httpd = _HTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.control = self
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self._httpd.socket.getsockname()[:2]
        return f"http://kit:{self.token}@{host}:{port}"

    def start(self) -> ControlServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-control", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self._httpd.server_close()
        self._httpd.close_connections()

    # -- references ----------------------------------------------------------------
    def _register(self, obj: Any) -> dict[str, Any]:
        with self._lock:
            ref = self._ids.get(id(obj))
            if ref is None or self._objects.get(ref) is not obj:
                ref = len(self._objects)
                self._objects[ref] = obj
                self._ids[id(obj)] = ref
        return {"$ref": ref, "type": type(obj).__name__, "methods": _public_methods(obj)}

    def _resolve(self, value: dict[str, Any]) -> Any:
        with self._lock:
            try:
                return self._objects[int(value["$ref"])]
            except (KeyError, ValueError, TypeError):
                raise ControlError(f"unknown reference {value.get('$ref')!r}") from None

    def encode(self, value: Any) -> Any:
        return _encode(value, self._register)

    # -- one request ---------------------------------------------------------------
    def handle(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "hello":
            return {**self.info, "pid": os.getpid(), "root": self._objects[0]}
        if op == "lease":
            return self._lease(int(request["pid"]))
        if op == "release":
            with self._lock:
                if self._holder == int(request["pid"]):
                    self._holder = None
            return None
        name = request.get("name")
        if not isinstance(name, str) or not name or name.startswith("_"):
            raise AttributeError(f"only public attributes cross the control channel, not {name!r}")
        target = self._resolve({"$ref": request.get("ref", 0)})
        if op == "get":
            value = getattr(target, name)
            if callable(value) and not isinstance(value, type):
                return {"$method": name}
            return value
        if op == "call":
            args = _decode(request.get("args", []), self._resolve)
            kwargs = _decode(request.get("kwargs", {}), self._resolve)
            return getattr(target, name)(*args, **kwargs)
        raise ControlError(f"unknown control operation {op!r}")

    def _lease(self, pid: int) -> None:
        with self._lock:
            holder = self._holder
            if holder is not None and holder != pid and _alive(holder):
                raise ControlBusy(
                    f"this fake already serves a run in process {holder}; a fake serves one run at "
                    "a time (its fault script and sandbox list would be shared): wait for that run, "
                    "or start another fake"
                )
            self._holder = pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    control: ControlServer

    def __init__(self, *args: Any, **kwargs: Any):
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        # A reply is written as headers, then body: without this each call waits out a delayed ACK.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.connections_lock:
            self.open_connections.add(conn)
        return conn, address

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.open_connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """End kept-alive connections too: a stopped channel answers nobody."""
        with self.connections_lock:
            live = list(self.open_connections)
        for conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("control connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        return  # no request log: it would only repeat method names

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        control = self.server.control
        given = self.headers.get("Authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {control.token}".encode()):
            self._drain()
            self._reply(401, {"error": {"type": "ControlError", "message": "wrong or missing control token"}})
            return
        if self.path != PATH:
            self._drain()
            self._reply(404, {"error": {"type": "ControlError", "message": f"no such control path {self.path!r}"}})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_REQUEST_BYTES:
            self.close_connection = True
            self._reply(400, {"error": {"type": "ControlError", "message": "a control request needs a JSON body"}})
            return
        try:
            request = json.loads(self.rfile.read(length))
            value = control.encode(control.handle(request))
        except Exception as exc:
            self._reply(
                200,
                {
                    "error": {
                        "type": type(exc).__name__,
                        "module": type(exc).__module__,
                        "message": str(exc),
                        "args": _json_args(exc),
                        "traceback": "".join(traceback.format_exception(exc)[-6:]),
                    }
                },
            )
            return
        self._reply(200, {"value": value})

    def _drain(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= MAX_REQUEST_BYTES:
            self.rfile.read(length)
        else:
            self.close_connection = True


# ------------------------------------------------------------------ client
def parse_address(address: str) -> tuple[str, int, str]:
    """(host, port, token) of a control address, or a ControlError that shows the expected form."""
    try:
        parts = urlsplit(address.strip())
        host, port, token = parts.hostname, parts.port, parts.password
    except ValueError:
        host = port = token = None
        parts = None
    if parts is None or parts.scheme != "http" or not host or not port or not token:
        raise ControlError(
            f"a control address looks like {ADDRESS_FORM} (as `hermes-backend-kit fake serve` "
            "prints it); the one given does not"
        )
    return host, port, token


class ControlClient:
    """Requests to one ControlServer; safe to use from many threads (a small pool of keep-alive connections).

    ``describe_failure`` adds what the owner knows when the server cannot be
    reached (for example the fake process's exit code and the end of its log).
    """

    def __init__(
        self,
        address: str,
        *,
        timeout: float = 120.0,
        label: str = "fake",
        describe_failure: Callable[[], str] | None = None,
    ):
        self.host, self.port, self._token = parse_address(address)
        self.address = address
        self.timeout = timeout
        self.label = label
        self.describe_failure = describe_failure
        self.remote_pid: int | None = None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
        for conn in idle:
            conn.close()

    def _unreachable(self, exc: BaseException) -> ControlError:
        more = ""
        if self.describe_failure is not None:
            try:
                more = self.describe_failure()
            except Exception:
                more = ""
        return ControlError(
            f"the {self.label} fake's control channel at {self.host}:{self.port} cannot be reached "
            f"({type(exc).__name__}: {exc}){'; ' + more if more else ''}"
        )

    def _post(self, body: bytes) -> dict[str, Any]:
        for attempt in (0, 1):
            with self._lock:
                reused = bool(self._idle)
                conn = self._idle.pop() if reused else None
            if conn is None:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                conn.request(
                    "POST", PATH, body, {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}
                )
                response = conn.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                conn.close()
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had closed: nothing was handled
                raise self._unreachable(exc) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise self._unreachable(exc) from None
            with self._lock:
                if self._closed or response.will_close:
                    conn.close()
                else:
                    self._idle.append(conn)
            if response.status == 401:
                raise ControlError(
                    f"the {self.label} fake refused the control token: the address is not this "
                    "fake's (it prints a new one each time it starts)"
                )
            try:
                return json.loads(data)
            except ValueError:
                raise ControlError(
                    f"the {self.label} fake's control channel answered {response.status} with "
                    f"something that is not JSON: {data[:200]!r}"
                ) from None
        raise AssertionError("unreachable")

    def request(self, op: str, **fields: Any) -> Any:
        body = json.dumps({"op": op, **{k: _encode(v, _no_objects) for k, v in fields.items()}}).encode("utf-8")
        reply = self._post(body)
        if "error" in reply:
            raise self._error(reply["error"])
        return _decode(reply.get("value"), self._proxy)

    def _error(self, error: dict[str, Any]) -> BaseException:
        name, message = str(error.get("type", "Exception")), str(error.get("message", ""))
        where = f"raised in the {self.label} fake's process" + (f" (pid {self.remote_pid})" if self.remote_pid else "")
        if name in ("ControlError", "ControlBusy") and error.get("module") in (None, __name__):
            return (ControlBusy if name == "ControlBusy" else ControlError)(message)
        kind = _builtin_exception(name) if error.get("module") == "builtins" else None
        if kind is not None:
            args = error.get("args")
            try:
                exc = kind(*args) if isinstance(args, list) else kind(message)
            except Exception:
                exc = kind(message)
        else:
            exc = RemoteError(f"{error.get('module')}.{name}", message, str(error.get("traceback", "")))
        exc.add_note(where)
        return exc

    def _proxy(self, value: dict[str, Any]) -> RemoteObject:
        return RemoteObject(self, int(value["$ref"]), str(value.get("type", "object")), value.get("methods", ()))

    # -- what proxies use ------------------------------------------------------------
    def get(self, ref: int, name: str) -> Any:
        value = self.request("get", ref=ref, name=name)
        if isinstance(value, dict) and set(value) == {"$method"}:
            return RemoteMethod(self, ref, name)
        return value

    def call(self, ref: int, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.request("call", ref=ref, name=name, args=list(args), kwargs=kwargs)

    def hello(self) -> dict[str, Any]:
        info = self.request("hello")
        if not isinstance(info, dict) or not isinstance(info.get("root"), RemoteObject):
            raise ControlError(f"{self.host}:{self.port} is not a fake's control channel")
        self.remote_pid = info.get("pid")
        return info


def _no_objects(value: Any) -> dict[str, Any]:
    if isinstance(value, RemoteObject):
        return {"$ref": object.__getattribute__(value, "_kit_remote")[1]}
    raise TypeError(f"a {type(value).__name__} cannot cross the control channel; pass plain data")


class RemoteMethod:
    """A method of an object in the serving process; calling it calls it there."""

    __slots__ = ("_client", "_name", "_ref")

    def __init__(self, client: ControlClient, ref: int, name: str):
        self._client, self._ref, self._name = client, ref, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._client.call(self._ref, self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<remote method {self._name} in the {self._client.label} fake>"


class RemoteObject:
    """An object living in the serving process, with its public methods and attributes.

    Methods are known from its class when the reference crossed; every other
    attribute is read from the serving process on each access (live).
    """

    __slots__ = ("_kit_remote",)

    def __init__(self, client: ControlClient, ref: int, type_name: str, methods: Any):
        object.__setattr__(self, "_kit_remote", (client, ref, type_name, frozenset(methods)))

    def __getattr__(self, name: str) -> Any:
        client, ref, _type, methods = object.__getattribute__(self, "_kit_remote")
        if name.startswith("_"):
            raise AttributeError(name)
        if name in methods:
            return RemoteMethod(client, ref, name)
        return client.get(ref, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{name}: attributes of an object in the fake's process are read-only from here")

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_kit_remote")[3])

    def __repr__(self) -> str:
        client, ref, type_name, _methods = object.__getattribute__(self, "_kit_remote")
        return f"<remote {type_name} #{ref} in the {client.label} fake (pid {client.remote_pid})>"

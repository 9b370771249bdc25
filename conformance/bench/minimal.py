"""Per vendor, the least a client must do for each thing Hermes asks of a backend, on its fake.

Each minimal client makes the fewest protocol calls its vendor's API allows
(create and wait until ready; one exec per command; release), directly through
the vendor SDK or the wire protocol, with no plugin, no Hermes host and no
policy around it.  It is the baseline a reference backend's cold start is compared with, in
the same process and the same run, interleaved.

The exec is the channel the backend itself runs Hermes's commands on (Upstash:
the WebSocket exec session; DeepInfra: the NDJSON exec stream; Cloudflare:
the bridge's exec stream), so the ratio compares like with like.  Releasing
the sandbox afterwards is not part of the figure.

``cold_start(in_host=True)`` is the same client inside the host: a bare
``BaseEnvironment`` of the loaded host whose only transport is that exec,
with no policy of its own.  The host runs its session bootstrap (a login
bash) and then its wrapped first command, waiting for each as it waits for
any backend's: the work Hermes itself requires of every backend, and so the
least a backend's cold start can cost.  What a backend does beyond it (file
sync, probes, status reads) is its own cost; calls.py names those calls.
``host_shell`` is that bare environment kept for more: the network figures
(network.py) run warm commands, a session and execute_code through it, and
``push``/``pull`` move one archive each way in one exec, the fewest calls a
file sync can make.

``stream(size)`` is the same client reading a command's ``size`` bytes of
output through that channel and discarding them: what the vendor's protocol
on this fake allows with no Hermes host and no capture, the ceiling a
backend's bounded-output figure is read against.

"From nothing" means no sandbox: an HTTP client (its connection pool and TLS
context) is process state, built once per minimal client as a long-lived
process would, wherever the SDK accepts one (deepinfra's DeepInfraClient, an
httpx client for the bridge).  upstash-box's ``Box.create`` builds its own
client on every call, in the backend as here.

A client reads the fake's address and key from the variables the fake exports
(``FakeService.env``), the same ones the backend reads.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from conformance.bench.measure import flood_command

EXEC_TIMEOUT_S = 60.0
STREAM_TIMEOUT_S = 600.0
STDIN_CHUNK = 256 * 1024
ARG_CHUNK = 32 * 1024  # base64 in argv pieces, each far below Linux's 128 KiB per argument


@dataclass(frozen=True)
class ColdSample:
    """One cold start: seconds from nothing to a created, ready sandbox, and to the first result."""

    created_s: float
    result_s: float
    ended: float = 0.0  # time.perf_counter() at the first result (calls after it belong to the release)


class MinimalClient(Protocol):
    """A vendor's fewest calls: make a sandbox, run one argv in it (with stdin bytes where the vendor's exec
    has a stdin channel), release it."""

    name: str
    backend: str
    has_stdin: bool  # the exec channel carries stdin (else stdin travels in the argv)

    def create(self) -> Any: ...
    def run(self, made: Any, argv: list[str], stdin: bytes | None = None) -> tuple[str, int]: ...
    def cold_start(self, in_host: bool = False) -> ColdSample: ...
    def release(self, made: Any) -> None: ...
    def stream(self, size: int) -> float: ...
    def close(self) -> None: ...


def cold_start(client: MinimalClient, in_host: bool = False) -> ColdSample:
    """Time ``create``, then the first ``true`` (directly, or as the host's first command after its session
    bootstrap); the release is not timed."""
    started = time.perf_counter()
    made = client.create()
    shell: Any = None
    try:
        created = time.perf_counter() - started
        if in_host:
            shell = host_shell(client, made)
            result = shell.execute("true")
            if result.get("returncode") != 0:
                raise RuntimeError(f"{client.name}: the host's first command exited {result.get('returncode')}")
        else:
            output, code = client.run(made, ["true"])
            if code != 0:
                raise RuntimeError(f"{client.name}: `true` exited {code}: {output[-300:]!r}")
        ended = time.perf_counter()
    finally:
        if shell is not None:  # the host's files in the sandbox go, whether or not the sandbox does
            with contextlib.suppress(Exception):
                shell.cleanup()
        client.release(made)
    return ColdSample(created, ended - started, ended)


def host_shell(client: MinimalClient, made: Any) -> Any:
    """A bare ``BaseEnvironment`` of the loaded host over ``client``'s exec in ``made`` and nothing else, its
    session bootstrap done: the host's own work per command over the vendor's fewest calls.  Its
    ``cleanup()`` removes the host's files from the sandbox (not the sandbox)."""
    from tools.environments.base import BaseEnvironment
    from tools.environments.base_output import _ThreadedProcessHandle

    class Bare(BaseEnvironment):
        _stdin_mode = "pipe" if client.has_stdin else "heredoc"

        def _run_bash(
            self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
        ) -> Any:
            argv = ["bash", "-l", "-c", cmd_string] if login else ["bash", "-c", cmd_string]
            stdin = None if stdin_data is None else stdin_data.encode("utf-8", "surrogateescape")
            return _ThreadedProcessHandle(lambda: client.run(made, argv, stdin))

        def cleanup(self) -> None:
            """The snapshot and cwd files the host wrote in the sandbox's temp dir."""
            files = [getattr(self, name, "") for name in ("_snapshot_path", "_cwd_file")]
            client.run(made, ["rm", "-f", "--", *(f for f in files if f)])

    shell = Bare(cwd="/", timeout=int(EXEC_TIMEOUT_S))
    shell.init_session()
    if not shell._snapshot_ready:
        raise RuntimeError(f"{client.name}: the host's session bootstrap failed")
    return shell


def push(client: MinimalClient, made: Any, archive: bytes, into: str) -> None:
    """Unpack the tar ``archive`` under ``into`` in one exec, base64-encoded (some vendors' stdin is text)
    on its stdin, or in its argv where the exec has no stdin."""
    unpack = f"base64 -d | {{ mkdir -p {shlex.quote(into)} && tar -xf - -C {shlex.quote(into)} --no-same-owner; }}"
    encoded = base64.b64encode(archive)
    if client.has_stdin:
        output, code = client.run(made, ["bash", "-c", unpack], encoded)
    else:
        text = encoded.decode("ascii")
        pieces = [text[i : i + ARG_CHUNK] for i in range(0, len(text), ARG_CHUNK)]
        output, code = client.run(made, ["bash", "-c", f'printf %s "$@" | {unpack}', "push", *pieces])
    if code != 0:
        raise RuntimeError(f"{client.name}: unpacking the pushed archive exited {code}: {output[-300:]!r}")


def pull(client: MinimalClient, made: Any, source: str) -> bytes:
    """A tar of ``source`` in the sandbox, in one exec (base64 on stdout: every vendor's channel takes text)."""
    output, code = client.run(made, ["bash", "-c", f"tar -cf - -C {shlex.quote(source)} . | base64 -w0"])
    if code != 0:
        raise RuntimeError(f"{client.name}: packing {source} exited {code}: {output[-300:]!r}")
    return base64.b64decode(output.strip())


def _name() -> str:
    return f"bench-min-{uuid.uuid4().hex[:12]}"


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """NDJSON lines from a body's raw chunks (no text decoding before json.loads, which takes bytes)."""
    pending = b""
    for chunk in chunks:
        parts = (pending + chunk).split(b"\n")
        pending = parts.pop()
        yield from parts
    if pending:
        yield pending


def _streamed(client: MinimalClient, run: Callable[[Any], int], size: int) -> float:
    """Seconds ``run`` takes to receive ``size`` bytes of output in a new sandbox (made and released
    untimed)."""
    made = client.create()
    try:
        started = time.perf_counter()
        received = run(made)
        elapsed = time.perf_counter() - started
    finally:
        client.release(made)
    if received != size:
        raise RuntimeError(f"{client.name}: {received} bytes of output came back, {size} were written")
    return elapsed


class MinimalUpstash:
    """upstash-box SDK: ``Box.create`` (it polls while the Box is "creating"), one exec session per command."""

    name = "minimal upstash_box"
    backend = "upstash_box"
    has_stdin = True

    def __init__(self, env: Mapping[str, str]):
        self.api_key, self.base_url = env["UPSTASH_BOX_API_KEY"], env["UPSTASH_BOX_BASE_URL"]
        self._closing: list[threading.Thread] = []

    def cold_start(self, in_host: bool = False) -> ColdSample:
        return cold_start(self, in_host)

    def run(self, box: Any, argv: list[str], stdin: bytes | None = None) -> tuple[str, int]:
        chunks: list[bytes] = []
        session = box.exec.session(argv=argv, cwd="/", on_stdout=chunks.append, on_stderr=chunks.append)
        try:
            if stdin is not None:
                for i in range(0, len(stdin), STDIN_CHUNK):
                    session.write(stdin[i : i + STDIN_CHUNK])
                session.end_stdin()
            code = int(session.wait(EXEC_TIMEOUT_S))
        except BaseException:
            session.close()
            raise
        # The exit frame is the result; the socket's closing handshake (a round trip) is not waited for.
        closing = threading.Thread(target=session.close, daemon=True, name="minimal-upstash-close")
        closing.start()
        self._closing = [t for t in self._closing if t.is_alive()] + [closing]
        return b"".join(chunks).decode("utf-8", "replace"), code

    def stream(self, size: int) -> float:
        def run(box: Any) -> int:
            received = [0]

            def count(data: bytes) -> None:
                received[0] += len(data)

            session = box.exec.session(
                argv=["bash", "-c", flood_command(size)], cwd="/", on_stdout=count, on_stderr=count
            )
            try:
                session.wait(STREAM_TIMEOUT_S)
            finally:
                session.close()
            return received[0]

        return _streamed(self, run, size)

    def create(self) -> Any:
        from upstash_box import Box

        return Box.create(name=_name(), api_key=self.api_key, base_url=self.base_url)

    def release(self, box: Any) -> None:
        try:
            box.delete()
        finally:
            box.close()

    def close(self) -> None:
        for thread in self._closing:
            thread.join(EXEC_TIMEOUT_S)


class MinimalDeepInfra:
    """deepinfra SDK: ``Sandbox.create(wait=True)`` (create, then GET until running), one ``exec`` per command."""

    name = "minimal deepinfra"
    backend = "deepinfra"
    has_stdin = False  # the exec has no stdin channel

    def __init__(self, env: Mapping[str, str]):
        from deepinfra import DeepInfraClient

        from fakes.deepinfra.settings import KEY_VAR, URL_VAR

        self.client = DeepInfraClient(api_key=env[KEY_VAR], base_url=env[URL_VAR], timeout=EXEC_TIMEOUT_S)

    def create(self) -> Any:
        from deepinfra import Sandbox

        return Sandbox.create(tags={"bench": "minimal"}, wait=True, client=self.client)

    def release(self, sandbox: Any) -> None:
        sandbox.terminate()

    def cold_start(self, in_host: bool = False) -> ColdSample:
        return cold_start(self, in_host)

    def run(self, sandbox: Any, argv: list[str], stdin: bytes | None = None) -> tuple[str, int]:
        if stdin is not None:
            raise ValueError(f"{self.name}: the exec has no stdin channel")
        done = sandbox.exec(*argv, timeout=EXEC_TIMEOUT_S)
        return f"{done.stdout or ''}{done.stderr or ''}", int(done.returncode)

    def stream(self, size: int) -> float:
        """The exec's NDJSON stream read line by line (``Sandbox.exec`` would hold it all in memory)."""
        from deepinfra import RequestSpec

        def run(sandbox: Any) -> int:
            received = 0
            spec = RequestSpec(
                "POST",
                f"/v1/sandboxes/{sandbox.id}/exec",
                timeout=STREAM_TIMEOUT_S,
                json={"command": ["bash", "-c", flood_command(size)], "timeout_seconds": int(STREAM_TIMEOUT_S)},
            )
            with self.client.stream(spec) as response:
                for line in _lines(response.iter_bytes()):
                    event = json.loads(line) if line.strip() else {}
                    received += len(event.get("stdout") or "") + len(event.get("stderr") or "")
            return received

        return _streamed(self, run, size)

    def close(self) -> None:
        self.client.close()


class MinimalCloudflare:
    """Bridge protocol v1 over HTTP: ``POST /v1/sandboxes/{id}`` (init), one ``POST .../exec`` stream per
    command (stdin in its body)."""

    name = "minimal cloudflare_sandbox"
    backend = "cloudflare_sandbox"
    has_stdin = True

    def __init__(self, env: Mapping[str, str]):
        import httpx

        headers = {
            "Authorization": f"Bearer {env['HERMES_CF_TOKEN']}",
            "Accept": "application/json",
            "User-Agent": "hermes-backend-kit-bench/minimal",
        }
        self.client = httpx.Client(base_url=env["HERMES_CF_ENDPOINT"], headers=headers, timeout=STREAM_TIMEOUT_S)

    def create(self) -> str:
        sid = _name()
        self.client.post(f"/v1/sandboxes/{sid}", json={"persistent": False}).raise_for_status()
        return sid

    def release(self, sid: str) -> None:
        self.client.request("DELETE", f"/v1/sandboxes/{sid}", json={"confirm": True})

    def _exec(self, sid: str, body: dict[str, Any], sink: Callable[[str], None]) -> int:
        """One exec; output events go to ``sink``; the exit code.  The body is read to its end, so the
        connection goes back to the pool for the next command."""
        code: int | None = None
        with self.client.stream("POST", f"/v1/sandboxes/{sid}/exec", json=body) as response:
            response.raise_for_status()
            for line in _lines(response.iter_raw()):
                event = json.loads(line) if line.strip() else {}
                if code is not None:
                    continue
                if event.get("type") == "output":
                    sink(event["data"])
                elif event.get("type") == "exit":
                    code = int(event["exit_code"])
                elif event.get("type") == "error":
                    raise RuntimeError(f"{self.name}: the exec ended with {event.get('code')!r}")
        if code is None:
            raise RuntimeError(f"{self.name}: the exec stream ended without an exit event")
        return code

    def cold_start(self, in_host: bool = False) -> ColdSample:
        return cold_start(self, in_host)

    def run(self, sid: str, argv: list[str], stdin: bytes | None = None) -> tuple[str, int]:
        body: dict[str, Any] = {"request_id": uuid.uuid4().hex, "command": shlex.join(argv), "timeout": EXEC_TIMEOUT_S}
        if stdin is not None:
            body["stdin"] = stdin.decode("utf-8", "surrogateescape")
        chunks: list[str] = []
        code = self._exec(sid, body, chunks.append)
        return "".join(chunks), code

    def stream(self, size: int) -> float:
        """Output beyond the v1 limit of 2,000,000 characters needs the large-output extension's
        ``max_output``; the Worker's /health says how much it allows."""
        limits = self.client.get("/health").json().get("limits") or {}
        body: dict[str, Any] = {"command": flood_command(size), "timeout": STREAM_TIMEOUT_S}
        if isinstance(limits.get("max_output"), int):
            body["max_output"] = limits["max_output"]

        def run(sid: str) -> int:
            received = [0]

            def count(data: str) -> None:
                received[0] += len(data)

            self._exec(sid, {**body, "request_id": uuid.uuid4().hex}, count)
            return received[0]

        return _streamed(self, run, size)

    def close(self) -> None:
        self.client.close()


MINIMAL_CLIENTS: dict[str, Callable[[Mapping[str, str]], MinimalClient]] = {
    "upstash_box": MinimalUpstash,
    "deepinfra": MinimalDeepInfra,
    "cloudflare_sandbox": MinimalCloudflare,
}


def for_backend(backend: str, env: Mapping[str, str]) -> MinimalClient | None:
    """The minimal client of ``backend``'s vendor, pointed at the fake whose variables are ``env``."""
    make = MINIMAL_CLIENTS.get(backend)
    return None if make is None else make(env)

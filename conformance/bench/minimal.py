"""Per vendor, the least a client must do to get from nothing to a first command's result on its fake.

Each minimal client makes the fewest protocol calls its vendor's API allows
(create, wait until ready, one exec of ``true``), directly through the vendor
SDK or the wire protocol, with no plugin, no Hermes host and no policy around
it.  It is the baseline a reference backend's cold start is compared with, in
the same process and the same run, interleaved: what the backend does beyond
these calls (session bootstrap, file sync, probes, lookups) is its own cost.

The exec is the channel the backend itself runs Hermes's commands on (Upstash:
the WebSocket exec session; DeepInfra: the NDJSON exec stream; Cloudflare:
the bridge's exec stream), so the ratio compares like with like.  Releasing
the sandbox afterwards is not part of the figure.

"From nothing" means no sandbox: an HTTP client (its connection pool and TLS
context) is process state, built once per minimal client as a long-lived
process would, wherever the SDK accepts one (deepinfra's DeepInfraClient, an
httpx client for the bridge).  upstash-box's ``Box.create`` builds its own
client on every call, in the backend as here.

A client reads the fake's address and key from the variables the fake exports
(``FakeService.env``), the same ones the backend reads.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

EXEC_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ColdSample:
    """One cold start: seconds from nothing to a created, ready sandbox, and to the first result."""

    created_s: float
    result_s: float


class MinimalClient(Protocol):
    name: str
    backend: str  # the reference backend it is the baseline of

    def cold_start(self) -> ColdSample: ...
    def close(self) -> None: ...


def _timed(create: Callable[[], Any], run: Callable[[Any], int], release: Callable[[Any], None],
           what: str) -> ColdSample:
    """Time ``create`` and then ``run`` on what it made (exit status 0 expected); release untimed."""
    started = time.perf_counter()
    made = create()
    try:
        created = time.perf_counter() - started
        code = run(made)
        done = time.perf_counter() - started
    finally:
        release(made)
    if code != 0:
        raise RuntimeError(f"{what}: `true` exited {code}")
    return ColdSample(created, done)


def _name() -> str:
    return f"bench-min-{uuid.uuid4().hex[:12]}"


class MinimalUpstash:
    """upstash-box SDK: ``Box.create`` (it polls while the Box is "creating"), one exec session."""

    name = "minimal upstash_box"
    backend = "upstash_box"

    def __init__(self, env: Mapping[str, str]):
        self.api_key, self.base_url = env["UPSTASH_BOX_API_KEY"], env["UPSTASH_BOX_BASE_URL"]

    def cold_start(self) -> ColdSample:
        from upstash_box import Box

        def run(box: Any) -> int:
            session = box.exec.session(argv=["true"], cwd="/")
            try:
                return int(session.wait(EXEC_TIMEOUT_S))
            finally:
                session.close()

        def release(box: Any) -> None:
            try:
                box.delete()
            finally:
                box.close()

        return _timed(lambda: Box.create(name=_name(), api_key=self.api_key, base_url=self.base_url), run, release,
                      self.name)

    def close(self) -> None:
        return None


class MinimalDeepInfra:
    """deepinfra SDK: ``Sandbox.create(wait=True)`` (create, then GET until running), one ``exec``."""

    name = "minimal deepinfra"
    backend = "deepinfra"

    def __init__(self, env: Mapping[str, str]):
        from deepinfra import DeepInfraClient

        from fakes.deepinfra.settings import KEY_VAR, URL_VAR

        self.client = DeepInfraClient(api_key=env[KEY_VAR], base_url=env[URL_VAR], timeout=EXEC_TIMEOUT_S)

    def cold_start(self) -> ColdSample:
        from deepinfra import Sandbox

        def create() -> Any:
            return Sandbox.create(tags={"bench": "minimal"}, wait=True, client=self.client)

        def run(sandbox: Any) -> int:
            return int(sandbox.exec("true", timeout=EXEC_TIMEOUT_S).returncode)

        return _timed(create, run, lambda sandbox: sandbox.terminate(), self.name)

    def close(self) -> None:
        self.client.close()


class MinimalCloudflare:
    """Bridge protocol v1 over HTTP: ``POST /v1/sandboxes/{id}`` (init), one ``POST .../exec`` stream."""

    name = "minimal cloudflare_sandbox"
    backend = "cloudflare_sandbox"

    def __init__(self, env: Mapping[str, str]):
        import httpx

        headers = {"Authorization": f"Bearer {env['HERMES_CF_TOKEN']}", "Accept": "application/json",
                   "User-Agent": "hermes-backend-kit-bench/minimal"}
        self.client = httpx.Client(base_url=env["HERMES_CF_ENDPOINT"], headers=headers, timeout=EXEC_TIMEOUT_S)

    def cold_start(self) -> ColdSample:
        client = self.client

        def create() -> str:
            sid = _name()
            client.post(f"/v1/sandboxes/{sid}", json={"persistent": False}).raise_for_status()
            return sid

        def run(sid: str) -> int:
            body = {"request_id": uuid.uuid4().hex, "command": "true", "timeout": EXEC_TIMEOUT_S}
            with client.stream("POST", f"/v1/sandboxes/{sid}/exec", json=body) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    event = json.loads(line) if line.strip() else {}
                    if event.get("type") == "exit":
                        return int(event["exit_code"])
                    if event.get("type") == "error":
                        raise RuntimeError(f"{self.name}: the exec ended with {event.get('code')!r}")
            raise RuntimeError(f"{self.name}: the exec stream ended without an exit event")

        def release(sid: str) -> None:
            client.request("DELETE", f"/v1/sandboxes/{sid}", json={"confirm": True})

        return _timed(create, run, release, self.name)

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

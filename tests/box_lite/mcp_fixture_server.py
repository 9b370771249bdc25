"""A small MCP server for the Box Lite tests, run inside a box as its workload.

``python3 mcp_fixture_server.py MODE`` listens on ``127.0.0.1:$WORKLOAD_PORT``:

- ``ok``: the ``mcp`` SDK's streamable HTTP server (FastMCP, one tool ``echo``) at
  ``/mcp``, refusing (401) a request whose bearer token is not ``$HERMES_BOX_TOKEN``, as
  an authenticated Executor does;
- ``bare``: a TCP listener that accepts connections and never answers;
- ``404``: an HTTP server with no MCP endpoint;
- ``500``: an HTTP server whose endpoint fails with 500;
- ``malformed``: an HTTP server answering ``initialize`` with 200, JSON and a session id,
  but a result without a protocol version.

It needs the SDK and its dependencies on ``PYTHONPATH`` (the tests copy them into the
box's /data, for the box's Python: the host's /usr/bin/python3).
"""

from __future__ import annotations

import os
import socket
import sys
import time


def _bare(port: int) -> None:
    with socket.create_server(("127.0.0.1", port)) as server:
        held = []
        while True:
            conn, _ = server.accept()
            held.append(conn)  # accepted, never answered


def _faulty(mode: str, port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    async def endpoint(request: Request) -> PlainTextResponse | JSONResponse:
        if mode == "500":
            return PlainTextResponse("internal error", status_code=500)
        body = {"jsonrpc": "2.0", "id": 1, "result": {"capabilities": {}, "serverInfo": {"name": "malformed"}}}
        return JSONResponse(body, headers={"Mcp-Session-Id": "fixture-session"})

    routes = [] if mode == "404" else [Route("/mcp", endpoint, methods=["POST", "DELETE"])]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


def _ok(port: int) -> None:
    import uvicorn
    from mcp.server.fastmcp import FastMCP
    from starlette.responses import PlainTextResponse

    token = os.environ["HERMES_BOX_TOKEN"]
    server = FastMCP("box-fixture", host="127.0.0.1", port=port)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    app = server.streamable_http_app()

    async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            offered = dict(scope["headers"]).get(b"authorization", b"")
            if offered != f"Bearer {token}".encode():
                await PlainTextResponse("token required", status_code=401)(scope, receive, send)
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    port = int(os.environ["WORKLOAD_PORT"])
    print(f"fixture MCP server ({mode}) on 127.0.0.1:{port} at {time.strftime('%H:%M:%S')}", flush=True)
    if mode == "bare":
        _bare(port)
    elif mode in ("404", "500", "malformed"):
        _faulty(mode, port)
    else:
        _ok(port)


if __name__ == "__main__":
    main()

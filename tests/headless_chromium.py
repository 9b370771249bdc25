"""Render a local HTML file in headless Chromium over the DevTools protocol, for the kit's own tests.

The browser runs with everything it writes under a temp root of its own
(profile, HOME, XDG directories, TMPDIR), in its own process group, and is
gone when ``render`` returns: closed over the protocol, then the group is
terminated and killed if anything of it is left, and the root removed (its
log kept for the caller).  The root sits directly in the system temp
directory: Chromium aborts when the path of its singleton socket, under
TMPDIR, exceeds a unix socket's 107 bytes, which a pytest tmp_path can.  What the page did is collected from
protocol events: console errors and uncaught exceptions, browser log errors
(a blocked or failed load, a Content-Security-Policy violation) and every
request the page made.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

NAMES = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")


def find() -> str | None:
    """The Chromium (or Chrome) executable on PATH, or None."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class Rendered:
    title: str
    text: str  # document.body.innerText: what a reader sees (closed <details> bodies excluded)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    screenshot: bytes = b""
    size: tuple[int, int] = (0, 0)  # the page's CSS width and height
    version: str = ""
    pid: int = 0  # the browser's process (and process group) id, gone when render returns


class _Protocol:
    """Requests and events on one DevTools websocket; events are kept in arrival order."""

    def __init__(self, ws: ClientConnection, deadline: float) -> None:
        self.ws, self.deadline, self.events, self._next = ws, deadline, [], 0

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            data = json.loads(self.ws.recv(timeout=max(self.deadline - time.monotonic(), 0.1)))
            if data.get("id") == ident:
                if "error" in data:
                    raise RuntimeError(f"DevTools {method} failed: {data['error']}")
                return data.get("result", {})
            if "method" in data:
                self.events.append(data)


def _devtools_url(profile: Path, proc: subprocess.Popen[bytes], deadline: float) -> str:
    """The browser's websocket address, from the DevToolsActivePort file it writes in its profile."""
    port_file = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with status {proc.returncode} before it listened")
        if port_file.exists():
            lines = port_file.read_text().split()
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        time.sleep(0.05)
    raise RuntimeError("chromium did not write DevToolsActivePort in time")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Wait for the browser's exit, then end whatever is left of its process group."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not group_alive(proc.pid):
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        end = time.monotonic() + 5
        while group_alive(proc.pid) and time.monotonic() < end:
            proc.poll()
            time.sleep(0.05)
    proc.poll()


def _errors(events: list[dict[str, Any]]) -> list[str]:
    found = []
    for event in events:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            found.append(f"exception: {details.get('text')} {details.get('exception', {}).get('description', '')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            found.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".rstrip())
        elif method == "Network.loadingFailed":
            found.append(f"load failed: {params.get('errorText')} ({params.get('blockedReason', '')})")
    return found


def render(page: Path, log_to: Path, *, width: int = 1280, height: int = 900, timeout: float = 90) -> Rendered:
    """Open ``page`` (a local file) and read back what it shows; the browser's output is copied to ``log_to``."""
    exe = find()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH")
    root = Path(tempfile.mkdtemp(prefix="kit-chromium-"))
    dirs = {name: root / name for name in ("profile", "home", "config", "cache", "data", "runtime", "tmp")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    dirs["runtime"].chmod(0o700)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(dirs["home"]),
        "LANG": "C.UTF-8",
        "XDG_CONFIG_HOME": str(dirs["config"]),
        "XDG_CACHE_HOME": str(dirs["cache"]),
        "XDG_DATA_HOME": str(dirs["data"]),
        "XDG_RUNTIME_DIR": str(dirs["runtime"]),
        "TMPDIR": str(dirs["tmp"]),
    }
    args = [
        exe,
        "--headless=new",
        "--remote-debugging-port=0",
        "--remote-debugging-address=127.0.0.1",
        f"--user-data-dir={dirs['profile']}",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-breakpad",
        "--hide-scrollbars",
        "--mute-audio",
        "about:blank",
    ]
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # Chromium refuses to start its sandbox as root
    log = (root / "chromium.log").open("wb")
    proc = subprocess.Popen(
        args, env=env, cwd=dirs["tmp"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
    )
    deadline = time.monotonic() + timeout
    try:
        with connect(_devtools_url(dirs["profile"], proc, deadline), max_size=None, open_timeout=30) as ws:
            cdp = _Protocol(ws, deadline)
            version = cdp.call("Browser.getVersion").get("product", "")
            target = cdp.call("Target.createTarget", url="about:blank")["targetId"]
            session = cdp.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                cdp.call(f"{domain}.enable", session)
            url = page.resolve().as_uri()
            cdp.call("Page.navigate", session, url=url)
            state = ""
            while time.monotonic() < deadline:
                state = cdp.call(
                    "Runtime.evaluate",
                    session,
                    returnByValue=True,
                    expression="document.readyState + ' ' + location.href",
                )["result"]["value"]
                if state == f"complete {url}":
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"the page did not load in {timeout} s (last state: {state})")

            def value(expression: str) -> Any:
                return cdp.call("Runtime.evaluate", session, expression=expression, returnByValue=True)["result"][
                    "value"
                ]

            text, title = value("document.body.innerText"), value("document.title")
            size = cdp.call("Page.getLayoutMetrics", session)["cssContentSize"]
            shot = cdp.call(
                "Page.captureScreenshot",
                session,
                format="png",
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000), "scale": 1},
            )
            requests = [e["params"]["request"]["url"] for e in cdp.events if e["method"] == "Network.requestWillBeSent"]
            rendered = Rendered(
                title=title,
                text=text,
                errors=_errors(cdp.events),
                requests=requests,
                screenshot=base64.b64decode(shot["data"]),
                size=(int(size["width"]), int(size["height"])),
                version=version,
                pid=proc.pid,
            )
            try:
                cdp.call("Browser.close")
            except Exception:  # the browser may close the socket before it answers
                pass
        return rendered
    finally:
        _end(proc)
        log.close()
        shutil.copyfile(root / "chromium.log", log_to)
        shutil.rmtree(root, ignore_errors=True)

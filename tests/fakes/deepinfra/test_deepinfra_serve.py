"""`hermes-backend-kit fake serve deepinfra` in its own process: the exports, and the unmodified SDK on them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(*extra: str) -> tuple[subprocess.Popen[str], dict[str, str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "fake", "serve", "deepinfra", *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("# the deepinfra fake is serving"):
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"fake serve ended early: {lines} {proc.stderr.read() if proc.stderr else ''}")
        lines.append(line.rstrip("\n"))
    exports = dict(line.removeprefix("export ").split("=", 1) for line in lines if line.startswith("export "))
    return proc, exports, lines


def test_serve_prints_the_sdk_variables_and_the_unmodified_sdk_works_with_them():
    port = _free_port()
    proc, exports, lines = _serve("--port", str(port), "--api-key", "di_cli_key")
    try:
        assert exports == {"DEEPINFRA_BASE_URL": f"http://127.0.0.1:{port}", "DEEPINFRA_API_KEY": "di_cli_key"}
        assert any(line.startswith("# paths: ") for line in lines)
        # The SDK's zero-config default client reads exactly these two variables.
        script = (
            "from deepinfra import Sandbox\n"
            "sb = Sandbox.create(tags={'via': 'env'})\n"
            "r = sb.exec('bash', '-c', 'echo $HOME; pwd')\n"
            "sb.fs.write('/workspace/f', b'x')\n"
            "print(r.stdout.split(), sb.fs.read('/workspace/f'))\n"
            "sb.terminate()\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPINFRA_")} | exports
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "['/root', '/workspace'] b'x'"
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0, "Ctrl-C must stop the fake cleanly"

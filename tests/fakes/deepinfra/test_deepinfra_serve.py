"""`hermes-backend-kit fake serve deepinfra` in its own process: the exports, and the unmodified SDK on them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from tests.served import serve


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_prints_the_sdk_variables_and_the_unmodified_sdk_works_with_them():
    port = _free_port()
    served = serve("deepinfra", "--port", str(port), "--api-key", "di_cli_key")
    proc, exports, lines = served.proc, served.exports, served.lines
    try:
        url = f"http://127.0.0.1:{port}"
        assert exports == {
            "DEEPINFRA_BASE_URL": url,
            "DEEPINFRA_SANDBOX_BASE_URL": url,
            "DEEPINFRA_API_KEY": "di_cli_key",
        }
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

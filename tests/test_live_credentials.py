"""A live run never invents a credential: what reaches the "vendor" is what the user set, or nothing.

The vendor is the Upstash fake started by hand (`fake serve`), reached through a
loopback relay that records every byte the run sends it: headers, bodies and
WebSocket frames.  The run is `certify --live`, so the kit knows no fake and
must treat the service as the real one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.credentials import ISSUED_PREFIX
from tests.conftest import ROOT
from tests.served import Served, serve

pytestmark = pytest.mark.suite
KEY_VAR = "UPSTASH_BOX_API_KEY"
URL_VAR = "UPSTASH_BOX_BASE_URL"
KIT_VALUES = (ISSUED_PREFIX, "kit-decoy-")  # what the kit makes up for fakes, and its decoy


class RecordingRelay:
    """A loopback TCP relay in front of ``upstream`` that keeps every byte its clients send."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.sent = bytearray()
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if record:
                    with self._lock:
                        self.sent += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def vendor() -> Iterator[tuple[Served, RecordingRelay]]:
    served = serve("upstash", "--profile", "suite")
    host, port = served.exports[URL_VAR].removeprefix("http://").rsplit(":", 1)
    relay = RecordingRelay((host, int(port)))
    try:
        yield served, relay
    finally:
        relay.close()
        served.stop()


def _certify(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("UPSTASH_", "HERMES_", "PYTEST_")) and k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "conformance.cli", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_an_unset_credential_stops_a_live_run_before_anything_reaches_the_vendor(tmp_path, vendor):
    _, relay = vendor
    env = {URL_VAR: f"http://127.0.0.1:{relay.port}"}
    for command in (["certify", "--out", str(tmp_path / "out")], ["doctor"]):
        done = _certify(tmp_path, env, *command, "--live", "--backend", "upstash_box")
        assert done.returncode == 2, done.stdout + done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and errors[0].startswith(f"error: {KEY_VAR} is not set"), done.stderr
        assert "never invents a credential" in errors[0]
    assert relay.connections == 0 and not relay.sent
    assert not (tmp_path / "out").exists(), "certify made its output folder for a run that never started"


def test_a_live_run_sends_the_users_credential_and_nothing_the_kit_made_up(tmp_path, vendor):
    served, relay = vendor
    key = served.exports[KEY_VAR]  # the user's own key: the fake's, as if it were the vendor's
    env = {KEY_VAR: key, URL_VAR: f"http://127.0.0.1:{relay.port}"}
    out = tmp_path / "out"
    done = _certify(
        tmp_path, env, "certify", "--live", "--backend", "upstash_box", "--select", "exec", "--out", str(out)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sent = bytes(relay.sent)
    assert relay.connections > 0 and key.encode() in sent  # the recorder sees the credentials a run sends
    for made_up in KIT_VALUES:
        assert made_up.encode() not in sent, f"the live run sent a value the kit made up ({made_up}...)"
    report = json.loads((out / "report.json").read_text())
    assert {"name": KEY_VAR, "origin": "user environment"} in report["credentials"]
    assert all(c["origin"] != "fake-issued" for c in report["credentials"])
    assert key not in json.dumps(report) and key not in (out / "report.md").read_text()
    assert f"- credentials: {KEY_VAR} (user environment)" in (out / "report.md").read_text()
    assert report["selection"] == "--select exec" and not report["certified"]


def test_a_fake_run_reports_the_credentials_it_issued(tmp_path):
    out = tmp_path / "out"
    done = _certify(tmp_path, {}, "certify", "--backend", "upstash_box", "--select", "probe", "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert {"name": KEY_VAR, "origin": "fake-issued"} in report["credentials"]
    assert "DIAGNOSTIC" in done.stdout and "not run" in done.stdout
    assert " fail" not in done.stdout.split("DIAGNOSTIC", 1)[1].replace("0 fail", "")

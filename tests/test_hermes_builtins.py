"""hermes:local and hermes:ssh: hermes-agent's own built-in environments, certified by the kit.

The certify runs need hermes-agent (`pip install 'hermes-backend-kit[hermes]'`, as `nox -s
hermes_builtins` installs it); the SSH run also needs a real sshd (tests/sshd.py).  Both runs must end
(a deadlock in Hermes's SSH cleanup must not block a worker), and every MUST clause either passes or
is one that docs/hermes-builtins.md explains with Hermes's source.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance import backends, capabilities, contract, hermes_builtins, verdicts
from conformance.errors import BackendConfigError, BackendLoadError, CapabilityError
from tests import sshd

ROOT = Path(__file__).resolve().parents[1]
HERMES = importlib.util.find_spec("hermes_cli") is not None
needs_hermes = pytest.mark.skipif(
    not HERMES, reason="needs hermes-agent: pip install 'hermes-backend-kit[hermes]' (nox -s hermes_builtins does)"
)
CERTIFY_TIMEOUT_S = 1200  # a run that has not ended by then has a blocked worker
PER_TASK = (
    "identity.task-isolation",
    "provider.task-id-shapes",
    "lifecycle.delete-own-only",
    "lifecycle.nonpersistent-deleted",
    "persist.nonpersistent-fresh",
    "env.no-host-leak",
)
DOC = ROOT / "docs" / "hermes-builtins.md"


def explained_ssh_failures() -> set[str]:
    """The clauses docs/hermes-builtins.md explains for hermes:ssh (its table of causes)."""
    text = DOC.read_text("utf-8")
    section = text.split("## Why `hermes:ssh` is not certified", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {cid for row in rows for cid in re.findall(r"`([a-z]+\.[a-z0-9-]+)`", row)}


# ------------------------------------------------------------------ resolving hermes:KIND
def test_an_unknown_builtin_names_the_ones_there_are():
    with pytest.raises(BackendLoadError) as caught:
        backends.resolve("hermes:docker")
    assert "hermes:local, hermes:ssh" in str(caught.value)


def test_without_hermes_agent_the_error_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "hermes_cli" else real(name, *a))
    with pytest.raises(BackendLoadError) as caught:
        backends.resolve("hermes:local")
    assert "pip install 'hermes-backend-kit[hermes]'" in str(caught.value)


def test_other_specs_resolve_as_before():
    assert backends.resolve("tempdir_box") == ("fakes.tempdir_box", "tempdir")
    assert backends.resolve("my.plugin:provider") == ("my.plugin:provider", None)


def test_the_ssh_target_comes_from_the_terminal_config():
    with pytest.raises(BackendConfigError) as caught:
        hermes_builtins._ssh_config({"ssh_user": "alice"})
    assert "terminal.ssh_host" in str(caught.value) and "--backend-config" in str(caught.value)
    with pytest.raises(BackendConfigError, match="ssh_port"):
        hermes_builtins._ssh_config({"ssh_host": "h", "ssh_user": "u", "ssh_port": "twenty-two"})
    assert hermes_builtins._ssh_config({"ssh_host": "h", "ssh_user": "u", "ssh_port": "2222"}) == {
        "host": "h",
        "user": "u",
        "port": 2222,
        "key": "",
        "persistent": True,
    }


def test_the_doc_explains_the_deadlock_and_known_clauses():
    explained = explained_ssh_failures()
    assert "lifecycle.gc-finalizer-during-sync" in explained
    kit_contract = contract.load()
    assert all(kit_contract.get(cid).level == "MUST" for cid in explained)


# ------------------------------------------------------------------ the backend kind
class _Provider:
    def __init__(self, kind: Any = None):
        if kind is not None:
            self.conformance_backend_kind = kind


def test_a_provider_declares_its_kind():
    assert capabilities.backend_kind(_Provider()) == "sandbox"
    assert capabilities.backend_kind(_Provider("host-attached")) == "host-attached"
    with pytest.raises(CapabilityError) as caught:
        capabilities.backend_kind(_Provider("hostattached"))
    assert "'sandbox', 'host-attached'" in str(caught.value)


@pytest.mark.parametrize("clause", PER_TASK)
def test_per_task_clauses_are_not_applicable_to_a_host_attached_backend_and_say_why(clause):
    kit_contract = contract.load()
    everything = set(kit_contract.capabilities)
    assert verdicts.applicability(kit_contract, kit_contract.get(clause), everything)[0] == verdicts.APPLIES
    verdict, reason = verdicts.applicability(kit_contract, kit_contract.get(clause), everything - {"per-task-sandbox"})
    assert verdict == verdicts.NA_PREFIX
    assert "per-task-sandbox" in reason and "host-attached" in reason


# ------------------------------------------------------------------ the certify runs
def _certify(
    tmp_path: Path, *args: str, wrap: Any = None, out_name: str = "out"
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / out_name
    # Two workers, as docs/hermes-builtins.md measured them (a later --workers in ``args`` wins).
    command = [
        sys.executable,
        "-m",
        "conformance.cli",
        "certify",
        "--host",
        "hermes",
        "--out",
        str(out),
        "--workers",
        "2",
    ]
    command += args
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TEMPDIR_BOX_", "HERMES_")) and k != "CI"
    }
    try:
        proc = subprocess.run(
            wrap(*command) if wrap else command,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=CERTIFY_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"certify {' '.join(args)} did not end within {CERTIFY_TIMEOUT_S}s: a worker is blocked")
    report_path = out / "report.json"
    assert report_path.exists(), f"no report was written:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, json.loads(report_path.read_text())


def _by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["clauses"]}


def _failing_musts(report: dict[str, Any]) -> set[str]:
    return {c["id"] for c in report["clauses"] if c["level"] == "MUST" and c["verdict"] == "fail"}


def _assert_host_attached(report: dict[str, Any]) -> None:
    assert report["backend"]["kind"] == "host-attached"
    assert "per-task-sandbox" not in report["backend"]["capabilities"]
    clauses = _by_id(report)
    for cid in PER_TASK:
        assert clauses[cid]["verdict"] == "not-applicable", (cid, clauses[cid].get("reason"))
        assert "host-attached" in clauses[cid].get("reason", ""), (cid, clauses[cid].get("reason"))


@needs_hermes
@pytest.mark.suite
def test_certify_hermes_local(tmp_path):
    proc, report = _certify(tmp_path, "--backend", "hermes:local")
    assert report["complete"], proc.stdout[-3000:]
    assert report["backend"]["name"] == "hermes_local" and report["host"]["mode"] == "hermes"
    _assert_host_attached(report)
    assert not _failing_musts(report), proc.stdout[-3000:]
    assert report["certified"] and proc.returncode == 0, report["not_certified_because"]
    assert "host-attached backend" in proc.stdout


@pytest.fixture
def ssh_server(tmp_path):
    why = sshd.missing()
    if why:
        pytest.skip(why)
    server = sshd.start(tmp_path / "sshd")
    yield server
    server.stop()


@needs_hermes
@pytest.mark.suite
@pytest.mark.full
def test_certify_hermes_ssh_against_a_real_sshd(tmp_path, ssh_server):
    config = tmp_path / "backend-config.yaml"
    config.write_text(yaml.safe_dump(ssh_server.backend_config()))
    proc, report = _certify(
        tmp_path, "--backend", "hermes:ssh", "--backend-config", str(config), wrap=ssh_server.client_argv
    )
    assert report["complete"], proc.stdout[-3000:]
    assert report["backend"]["name"] == "hermes_ssh"
    _assert_host_attached(report)
    gc_sync = _by_id(report)["lifecycle.gc-finalizer-during-sync"]
    assert gc_sync["verdict"] == "fail", gc_sync
    assert ".sync.lock" in gc_sync["reason"], gc_sync["reason"]
    shared = _by_id(report)["lifecycle.cleanup-spares-others"]
    assert shared["verdict"] == "fail" and "shared one connection" in shared["reason"], shared
    # Every other check has a connection of its own: the failures are the page's, the same in every run.
    assert _failing_musts(report) == explained_ssh_failures(), sorted(_failing_musts(report))


@needs_hermes
@pytest.mark.suite
@pytest.mark.full
def test_hermes_ssh_meets_transport_faults_on_the_connection_it_keeps(tmp_path, ssh_server):
    # Hermes keeps one ControlMaster connection per environment and sends every command over it: the
    # kit's TCP proxy must fault the command on that connection, never its handshake.
    config = tmp_path / "backend-config.yaml"
    target = ssh_server.backend_config()
    target["terminal"]["ssh_port"] = "${HERMES_KIT_TCP_PROXY_PORT}"  # type: ignore[index]
    config.write_text(yaml.safe_dump(target))
    known_hosts = ssh_server.client_home / ".ssh" / "known_hosts"
    before = known_hosts.read_text()
    proc, report = _certify(
        tmp_path,
        "--backend",
        "hermes:ssh",
        "--backend-config",
        str(config),
        f"--client-faults=tcp:127.0.0.1:{ssh_server.port}",
        "--select",
        "transport",
        "--workers",
        "0",
        wrap=ssh_server.client_argv,
    )
    clauses = _by_id(report)
    for clause in ("faults.dropped-mid-command", "faults.silent-server", "faults.half-closed"):
        assert clauses[clause]["verdict"] == "pass", (clause, clauses[clause]["reason"], proc.stdout[-3000:])
    # Hermes's cleanup syncs files back over the silent connection, for up to 120 s (docs/hermes-builtins.md)
    finalizer = clauses["faults.silent-finalizer"]
    assert finalizer["verdict"] == "fail" and "did not return within" in finalizer["reason"], finalizer
    assert known_hosts.read_text() == before, "ssh learned the proxy's port as another host"

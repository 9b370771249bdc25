"""One policy for every reference backend: each point checked the same way on all of them.

Each test is parametrized over upstash_box, cloudflare_sandbox, deepinfra and
box_lite and drives the real backend against its real fake (fakes.services.start:
loopback server, box world, faults armed by role; for box_lite, a Box Lite home
whose boxes it makes itself), so what is compared is behaviour a user or Hermes
sees: the exception raised, what the status calls say, which sandboxes exist
afterwards.  The service's refusals and rate limits concern the backends of a
vendor service only (box_lite has no service to refuse or limit it).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance.backends import SERVICE_BACKENDS
from fakes.fake_service import FakeService
from fakes.services import start
from reference.common import retry
from reference.common.errors import SettingsError
from reference.common.plugin import PROBE_TASK_ID

pytestmark = pytest.mark.usefixtures("builtin_host")

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = {
    # backend: (fake, provider "module:Class", its first required variable)
    "upstash_box": ("upstash", "reference.upstash_box.provider:UpstashBoxProvider", "UPSTASH_BOX_API_KEY"),
    "cloudflare_sandbox": (
        "cloudflare",
        "reference.cloudflare_sandbox.provider:CloudflareSandboxProvider",
        "HERMES_CF_ENDPOINT",
    ),
    "deepinfra": ("deepinfra", "reference.deepinfra.provider:DeepInfraProvider", "DEEPINFRA_API_KEY"),
    # No credential: the first variable it reads through the secret scope.
    "box_lite": ("box_lite", "reference.box_lite.provider:BoxLiteProvider", "HERMES_BOX_HOME"),
}
VENDOR_PREFIXES = ("UPSTASH_BOX_", "HERMES_CF_", "DEEPINFRA_", "HERMES_BOX_")
# A bad value of a setting every backend reads, and one of each backend's own: (where, values, setting).
BAD_SETTINGS = [
    ("upstash_box", "config", {"container_persistent": "maybe"}, "terminal.container_persistent"),
    ("cloudflare_sandbox", "config", {"container_persistent": "maybe"}, "terminal.container_persistent"),
    ("deepinfra", "config", {"container_persistent": "maybe"}, "terminal.container_persistent"),
    ("upstash_box", "config", {"upstash_box_name_prefix": "Bad Prefix!"}, "terminal.upstash_box_name_prefix"),
    ("upstash_box", "config", {"upstash_box_keep_alive": "sometimes"}, "terminal.upstash_box_keep_alive"),
    ("cloudflare_sandbox", "env", {"HERMES_CF_INSTANCE": "huge"}, "HERMES_CF_INSTANCE"),
    ("cloudflare_sandbox", "env", {"HERMES_CF_TOKEN": "has a space " * 4}, "HERMES_CF_TOKEN"),
    ("cloudflare_sandbox", "config", {"cwd": "relative/dir"}, "terminal.cwd"),
    ("deepinfra", "env", {"DEEPINFRA_SANDBOX_PLAN": "no such plan!"}, "DEEPINFRA_SANDBOX_PLAN"),
    ("box_lite", "config", {"container_persistent": "maybe"}, "terminal.container_persistent"),
    ("box_lite", "env", {"HERMES_BOX_NAME": "Not A Box!"}, "HERMES_BOX_NAME"),
    ("box_lite", "config", {"box_lite_box": "Bad Name"}, "terminal.box_lite_box"),
    ("box_lite", "config", {"box_lite_network": "sometimes"}, "terminal.box_lite_network"),
]


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, FakeService]]:
    started: dict[str, FakeService] = {}
    try:
        for backend, (fake, _, _) in BACKENDS.items():
            started[backend] = start(fake, tmp_path_factory.mktemp(fake))
        yield started
    finally:
        for service in started.values():
            service.stop()


class Subject:
    """One backend pointed at its fake, with a HERMES_HOME of its own."""

    def __init__(self, backend: str, fake: FakeService, home: Path, monkeypatch: pytest.MonkeyPatch):
        self.backend, self.fake, self.home, self._monkeypatch = backend, fake, home, monkeypatch
        _, spec, self.credential = BACKENDS[backend]
        module, _, attr = spec.partition(":")
        self.provider: Any = getattr(importlib.import_module(module), attr)()
        self.secrets = [self.fake.env[name] for name in sorted(self.fake.secret_vars)]

    def terminal(self, **values: Any) -> None:
        (self.home / "config.yaml").write_text(yaml.safe_dump({"terminal": values}))

    def setenv(self, **values: str) -> None:
        for name, value in values.items():
            self._monkeypatch.setenv(name, value)

    def create(
        self, task_id: str = "policy", *, persistent: bool = False, container_config: dict[str, Any] | None = None
    ) -> Any:
        if container_config is None:
            container_config = {"container_persistent": persistent}
        return self.provider.create_environment(cwd="", timeout=30, task_id=task_id, container_config=container_config)

    def live(self) -> set[str]:
        """The fake's sandboxes that exist (whatever their state) and are not deleted."""
        return {sid for sid, state in self.fake.world.sandboxes().items() if state != "deleted"}

    def says_no_secret(self, *texts: str) -> None:
        for text in texts:
            for value in self.secrets:
                assert value not in text, f"{self.backend}: a credential's value appears in {text[:200]!r}"


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def subject_for(
    backend: str, fakes: dict[str, FakeService], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Subject:
    for name in [k for k in os.environ if k.startswith(VENDOR_PREFIXES)]:
        monkeypatch.delenv(name)
    home = tmp_path / "hermes"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    subject = Subject(backend, fakes[backend], home, monkeypatch)
    subject.setenv(**subject.fake.env)
    subject.terminal()
    return subject


@pytest.fixture
def subject(backend: str, fakes: dict[str, FakeService], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Subject:
    return subject_for(backend, fakes, tmp_path, monkeypatch)


@pytest.fixture(params=sorted(b for b in BACKENDS if b in SERVICE_BACKENDS))
def service_subject(
    request: pytest.FixtureRequest, fakes: dict[str, FakeService], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Subject:
    """A backend of a vendor service: its fake can refuse and rate-limit it."""
    return subject_for(str(request.param), fakes, tmp_path, monkeypatch)


def host_connection_error() -> type[Exception]:
    from tools.environments.base import EnvironmentConnectionError

    return EnvironmentConnectionError


# ------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(("backend", "where", "values", "setting"), BAD_SETTINGS)
def test_a_bad_setting_is_one_error_naming_the_setting_and_the_fix(
    backend, where, values, setting, fakes, tmp_path, monkeypatch, caplog
):
    s = subject_for(backend, fakes, tmp_path, monkeypatch)
    if where == "config":
        s.terminal(**values)
    else:
        s.setenv(**values)
    before = s.live()
    with pytest.raises(SettingsError) as raised:
        s.create(container_config={})  # config.yaml decides, as on a host that passes no container_persistent
    error = raised.value
    text = str(error)
    # The same class in every backend, and Hermes's connection error: shown as degraded, with the fix.
    assert isinstance(error, host_connection_error())
    assert error.setting == setting
    assert text.startswith(f"{backend}: {setting} "), text
    assert error.fix and text.endswith(f"; {error.fix}"), text
    assert getattr(error, "retry_hint", None) == error.fix
    assert s.live() == before, "a sandbox was created for a configuration that cannot work"

    status, detail = s.provider.probe()
    assert status == "needs_setup" and detail.startswith(f"{setting} ") and error.fix in detail
    with caplog.at_level(logging.WARNING):
        assert s.provider.check_requirements({}) is False
    warned = [r.getMessage() for r in caplog.records if setting in r.getMessage()]
    assert warned, f"check_requirements() logged no warning naming {setting}"
    failing = [row for row in s.provider.doctor_checks() if not row[0]]
    assert any(setting in row[2] for row in failing), failing
    s.says_no_secret(text, detail, *warned, *(row[2] for row in failing))
    for value in values.values():
        if setting in s.fake.secret_vars:  # a credential's bad value is never echoed either
            assert value not in text and value not in detail


# ------------------------------------------------------------------------------ secret scope
def test_a_broken_secret_scope_is_a_missing_credential_and_nothing_is_read_elsewhere(subject, caplog):
    """Multiplexed profiles, no scope installed: os.environ holds working credentials (another
    profile's); a backend that read them would create a sandbox."""
    scope = importlib.import_module("agent.secret_scope")
    name, before = subject.credential, subject.live()
    scope.set_multiplex_active(True)
    try:
        assert subject.provider.is_available() is False
        status, detail = subject.provider.probe()
        assert status == "needs_setup" and detail.startswith(f"{name} ") and "secret scope" in detail
        with caplog.at_level(logging.WARNING):
            assert subject.provider.check_requirements({}) is False
        assert any(name in r.getMessage() and "secret scope" in r.getMessage() for r in caplog.records)
        rows = {row[1]: row for row in subject.provider.doctor_checks()}
        assert rows[name][0] is False and "secret scope" in rows[name][2]
        with pytest.raises(SettingsError) as raised:
            subject.create()
        assert isinstance(raised.value, host_connection_error())
        assert raised.value.setting == name and "secret scope" in str(raised.value)
        assert subject.live() == before, "a sandbox was created with credentials read outside the scope"

        # The same values inside the profile's scope: the backend works.
        token = scope.set_secret_scope(dict(subject.fake.env))
        try:
            assert subject.provider.is_available() is True and subject.provider.probe()[0] == "ready"
            env = subject.create()
            try:
                assert env.execute("echo scoped")["output"].strip() == "scoped"
            finally:
                env.cleanup(force_remove=True)
        finally:
            scope.reset_secret_scope(token)
    finally:
        scope.set_multiplex_active(False)
    subject.says_no_secret(detail, str(raised.value), *(r.getMessage() for r in caplog.records))


# -------------------------------------------------------------------------------- connection
def test_a_refusing_service_is_one_connection_error_without_the_credential(service_subject):
    """The service refuses the create (403) and echoes the credential in its error body."""
    subject = service_subject
    armed = subject.fake.world.faults.arm(
        "status", "create", status=403, times=-1, message=f"forbidden for {' '.join(subject.secrets)}"
    )
    before = subject.live()
    try:
        with pytest.raises(host_connection_error()) as raised:
            subject.create()
    finally:
        subject.fake.world.faults.clear()
    error = raised.value
    assert not isinstance(error, SettingsError), "a refusal by the service is not a settings error"
    assert armed.fired == 1, "a refused create was sent again"
    assert str(error).startswith(f"{subject.backend}: ")
    hint = getattr(error, "retry_hint", "")
    assert hint and subject.credential in hint, f"the retry hint {hint!r} does not name {subject.credential}"
    subject.says_no_secret(str(error), hint)
    assert subject.live() == before


# ------------------------------------------------------------------------------------- retry
def test_a_rate_limited_create_gets_the_common_retry_budget(service_subject, monkeypatch):
    """429 (refused: nothing was made) is asked again, RATE_LIMITED_ATTEMPTS times in all."""
    subject = service_subject
    monkeypatch.setattr(retry, "BACKOFF_S", 0.001)  # the number of attempts is the point, not the pauses
    faults = subject.fake.world.faults
    try:
        armed = faults.arm("status", "create", status=429, times=retry.RATE_LIMITED_ATTEMPTS - 1)
        env = subject.create()
        env.cleanup(force_remove=True)
        assert armed.fired == retry.RATE_LIMITED_ATTEMPTS - 1
        faults.clear()
        armed = faults.arm("status", "create", status=429, times=-1)
        with pytest.raises(host_connection_error()) as raised:
            subject.create()
        assert armed.fired == retry.RATE_LIMITED_ATTEMPTS
        assert str(raised.value).startswith(f"{subject.backend}: ")
    finally:
        faults.clear()


# ----------------------------------------------------------------------------------- cleanup
def test_cleanup_takes_force_remove_and_it_deletes_a_persistent_sandbox(subject):
    env = subject.create("policy-persistent", persistent=True)
    parameter = inspect.signature(type(env).cleanup).parameters.get("force_remove")
    assert parameter is not None and parameter.default is False, f"{type(env).__name__}.cleanup()"
    assert env.execute("true")["returncode"] == 0
    mine = subject.live()
    env.cleanup(force_remove=True)
    gone = mine - subject.live()
    assert len(gone) == 1, f"cleanup(force_remove=True) deleted {sorted(gone)}; it must delete its own sandbox"


# ------------------------------------------------------------------------------------- probe
def test_the_probe_task_id_is_written_once_in_the_reference_code():
    found = [
        (path.relative_to(ROOT), line)
        for pattern in ("*.py", "*.ts")
        for path in sorted((ROOT / "reference").rglob(pattern))
        if "node_modules" not in path.parts
        for line in path.read_text(encoding="utf-8").splitlines()
        if "prompt-backend-probe" in line
    ]
    assert found == [(Path("reference/common/plugin.py"), f'PROBE_TASK_ID = "{PROBE_TASK_ID}"')], found


def test_the_prompt_probe_leaves_no_sandbox(subject):
    before = subject.live()
    env = subject.provider.create_environment(
        cwd="", timeout=10, task_id=PROBE_TASK_ID, container_config={"container_persistent": True}
    )
    result = env.execute("uname -s", timeout=10)
    assert isinstance(result["output"], str) and isinstance(result["returncode"], int)
    env.cleanup(force_remove=True)  # what Hermes's prompt builder does after the probe
    assert subject.live() == before

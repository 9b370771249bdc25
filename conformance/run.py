"""One conformance run in one process: host, fake, plugin, capabilities, environments.

``KitRun.start`` does, in order: read --backend-config, lay out a private
HERMES_HOME, start the fake service (its variables exported), install the
host, load the plugin, give every strip_env_keys variable a value so leaks
are detectable, and resolve capabilities.  ``create`` builds environments
through the host's factory and remembers them, so ``close`` can clean up
whatever a failing check left behind.
"""

from __future__ import annotations

import importlib
import logging
import os
import secrets
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance import backends, capabilities, config, contract
from conformance.host import abi, factory, features, loader
from conformance.host.registry import ProviderRegistry

logger = logging.getLogger("conformance")


@dataclass
class RunOptions:
    backend: str = backends.DEFAULT_BACKEND
    backend_config: str | None = None
    host: str = "auto"
    fake: str | None = None
    live: bool = False


@dataclass
class KitRun:
    options: RunOptions
    workdir: Path
    contract: contract.Contract
    host: abi.HostInfo
    host_features: dict[str, bool]
    registry: ProviderRegistry
    plugin: loader.LoadedPlugin
    backend_config: config.BackendConfig
    terminal_config: dict[str, Any]
    fake: Any
    capabilities: capabilities.Capabilities
    hermes_home: Path
    secrets: dict[str, str]
    _envs: list[Any] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _env_is_base: bool | None = field(default=None, repr=False)

    # -- setup ---------------------------------------------------------------------
    @classmethod
    def start(cls, options: RunOptions, workdir: Path) -> KitRun:
        kit_contract = contract.load()
        declarable = {n for n, c in kit_contract.capabilities.items() if c["determined_by"] == "declared"}
        backend_config = config.load(options.backend_config, declarable)
        spec, default_fake = backends.resolve(options.backend)
        if options.live and options.fake:
            raise config.BackendConfigError("--live and --fake exclude each other; pick one")
        if options.live and os.environ.get("CI") and os.environ.get("HERMES_KIT_ALLOW_LIVE") != "1":
            # Live runs create billed sandboxes with real credentials: never by accident in CI.
            raise config.BackendConfigError(
                "--live refuses to run in CI (CI is set); set HERMES_KIT_ALLOW_LIVE=1 "
                "in the job that is meant to certify against the real service")
        fake_name = None if options.live else (options.fake or default_fake)

        hermes_home = _make_hermes_home(workdir / "hermes-home", backend_config.terminal)
        os.environ["HERMES_HOME"] = str(hermes_home)
        os.environ.update(backend_config.env)
        fake = None
        if fake_name:
            from fakes import services

            fake = services.start(fake_name, workdir / f"fake-{fake_name}")
            os.environ.update(fake.env)

        host = abi.install(options.host)
        host_features = features.detect()
        registry = ProviderRegistry()
        terminal_config = dict(backend_config.terminal)
        plugin = loader.load(spec, registry, config={"terminal": terminal_config})
        run_secrets = _seed_secrets(plugin.provider, fake)
        caps = capabilities.resolve(kit_contract, provider=plugin.provider, loaded=plugin,
                                    config_caps=backend_config.capabilities,
                                    world=getattr(fake, "world", None))
        return cls(options, workdir, kit_contract, host, host_features, registry, plugin,
                   backend_config, terminal_config, fake, caps, hermes_home, run_secrets)

    # -- what checks use -------------------------------------------------------------
    @property
    def provider(self) -> Any:
        return self.plugin.provider

    @property
    def world(self) -> Any:
        return getattr(self.fake, "world", None)

    def has(self, capability: str) -> bool:
        return self.capabilities.has(capability)

    def host_has(self, feature: str) -> bool:
        return bool(self.host_features.get(feature))

    def new_task_id(self, label: str = "check") -> str:
        return f"kit-{label}-{uuid.uuid4().hex[:8]}"

    def create(self, task_id: str | None = None, *, persistent: bool | None = False, track: bool = True,
               **kwargs: Any) -> Any:
        """A new environment built exactly as Hermes builds one.

        Checks default to non-persistent sandboxes so a run leaves nothing
        behind; pass persistent=None for the configured (Hermes default) mode.
        """
        env = factory.create_environment(
            self.provider, self.terminal_config, task_id=task_id or self.new_task_id(),
            persistent=persistent, **kwargs,
        )
        if track:
            with self._lock:
                self._envs.append(env)
        return env

    def env_is_base(self) -> bool:
        """Does the backend inherit the host's BaseEnvironment (so host features apply)?"""
        if self._env_is_base is None:
            base = importlib.import_module("tools.environments.base").BaseEnvironment
            env = self.create(self.new_task_id("class-probe"))
            try:
                self._env_is_base = isinstance(env, base)
            finally:
                self.release(env)
        return self._env_is_base

    def release(self, env: Any) -> None:
        try:
            env.cleanup()
        except Exception as exc:
            logger.warning("cleanup of a check environment failed: %s", exc)
        with self._lock:
            if env in self._envs:
                self._envs.remove(env)

    def secret_values(self) -> list[str]:
        return [v for v in self.secrets.values() if v]

    def context(self) -> dict[str, Any]:
        """What the report needs from this process (sent with each check's report)."""
        plugin = self.plugin
        return {
            "backend": {
                "spec": self.options.backend,
                "name": getattr(self.provider, "name", None),
                "plugin": plugin.plugin_name,
                "version": plugin.version,
                "source": plugin.source,
                "capabilities": sorted(self.capabilities.present),
                "declared_capabilities": sorted(self.capabilities.declared),
                "declared_by": self.capabilities.declared_by,
                "environment_inherits_base": self._env_is_base,
            },
            "host": {**self.host.to_dict(), "features": self.host_features},
            "fake": getattr(self.fake, "name", None),
            "live": self.options.live,
        }

    def close(self) -> None:
        with self._lock:
            leftovers, self._envs = self._envs, []
        for env in leftovers:
            try:
                env.cleanup()
            except Exception:
                pass
        if self.fake is not None:
            self.fake.stop()


def _make_hermes_home(home: Path, terminal: dict[str, Any]) -> Path:
    """A private HERMES_HOME with skills, cache files, one credential file, and
    config.yaml holding the run's terminal settings, where plugins read them."""
    (home / "skills" / "kit-skill").mkdir(parents=True, exist_ok=True)
    (home / "skills" / "kit-skill" / "SKILL.md").write_text("# kit skill\nsynced by the kit\n")
    (home / "cache" / "images").mkdir(parents=True, exist_ok=True)
    (home / "cache" / "images" / "pixel.bin").write_bytes(bytes(range(256)))
    (home / "credentials").mkdir(exist_ok=True)
    (home / "credentials" / "service.json").write_text('{"token": "kit-credential"}\n')
    settings = {**terminal, "credential_files": ["credentials/service.json"]}
    (home / "config.yaml").write_text(yaml.safe_dump({"terminal": settings}))
    return home


def _seed_secrets(provider: Any, fake: Any) -> dict[str, str]:
    """Give every credential variable a recognisable value so leaks can be found."""
    try:
        names = {str(k) for k in provider.strip_env_keys}
    except Exception:
        names = set()
    names |= set(getattr(fake, "secret_vars", ()))
    values = {}
    for name in sorted(names):
        if not os.environ.get(name):
            os.environ[name] = f"kit-secret-{secrets.token_hex(12)}"
        values[name] = os.environ[name]
    return values

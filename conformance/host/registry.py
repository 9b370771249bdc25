"""The provider registry and the PluginContext a plugin's register(ctx) receives.

Rules from research/hermes-host.md section 2.2: the provider must be a
TerminalEnvironmentProvider (TypeError), its name non-empty after strip
(ValueError) and not a built-in (ValueError); the key is name.strip().lower();
re-registration overwrites; scoped registrations win over global ones.  The
context never lets a rejection raise into the plugin: it logs and returns None.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the active host's class; typed as the stand-in it models
    from agent.terminal_env_provider import TerminalEnvironmentProvider

logger = logging.getLogger("hermes_cli.plugins")
_SETTING_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")  # one part of a plugin-relative settings key

# Every register_* method of Hermes's PluginContext (hermes_cli/plugins.py): a plugin may call any
# of them; any other register_* name is a typo the plugin would never notice if the context
# accepted it silently, so loading fails with the closest valid name.
HERMES_REGISTER_NAMES = frozenset(
    {
        "register_approval_transport",
        "register_auxiliary_task",
        "register_browser_provider",
        "register_cli_command",
        "register_command",
        "register_context_engine",
        "register_context_reference",
        "register_dashboard_auth_provider",
        "register_hook",
        "register_image_gen_provider",
        "register_memory_provider",
        "register_middleware",
        "register_platform",
        "register_platform_handler",
        "register_redaction_patterns",
        "register_secret_source",
        "register_skill",
        "register_slack_action_handler",
        "register_system_prompt_section",
        "register_telegram_handler",
        "register_terminal_environment_provider",
        "register_tool",
        "register_transcription_provider",
        "register_tts_provider",
        "register_video_gen_provider",
        "register_web_search_provider",
    }
)


def unknown_register_name(name: str) -> str:
    """The message for a register_* name Hermes's PluginContext does not have, with the closest valid one."""
    close = difflib.get_close_matches(name, sorted(HERMES_REGISTER_NAMES), n=1, cutoff=0.0)
    return (
        f"Hermes's plugin context has no {name}(); the closest valid name is {close[0]}"
        if close
        else f"Hermes's plugin context has no {name}()"
    )


# The names the release the builtin host follows keeps for its own backends (agent/terminal_env_registry.py
# BUILTIN_BACKEND_NAMES); a real Hermes tree's own set is read from it (reserved_names).
BUILTIN_RELEASE_NAMES = frozenset(
    {"local", "docker", "singularity", "modal", "managed_modal", "daytona", "vercel_sandbox", "ssh"}
)


def reserved_names() -> frozenset[str]:
    """The backend names the running host keeps for itself: its registry's when it has one (later releases
    reserve more, earlier ones fewer), else those of the release the builtin host follows."""
    try:
        module = importlib.import_module("agent.terminal_env_registry")
    except Exception:
        return BUILTIN_RELEASE_NAMES
    names = getattr(module, "BUILTIN_BACKEND_NAMES", None)
    if isinstance(names, (set, frozenset)) and all(isinstance(n, str) for n in names):
        return frozenset(n.lower() for n in names)
    return BUILTIN_RELEASE_NAMES


def provider_base_class() -> type[TerminalEnvironmentProvider]:
    module = importlib.import_module("agent.terminal_env_provider")
    cls: type[TerminalEnvironmentProvider] = module.TerminalEnvironmentProvider
    return cls


class ProviderRegistry:
    def __init__(self) -> None:
        self._global: dict[str, Any] = {}
        self._scoped: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.generation = 0

    def register(self, provider: Any, scope: str | None = None) -> str:
        if not isinstance(provider, provider_base_class()):
            raise TypeError(f"{type(provider).__name__} is not a TerminalEnvironmentProvider")
        name = getattr(provider, "name", None)
        if not isinstance(name, str) or not name.strip():
            raise ValueError("provider.name must be a non-empty string")
        key = name.strip().lower()
        if key in reserved_names():
            raise ValueError(f"{key!r} is a built-in backend name of this host")
        with self._lock:
            table = self._scoped.setdefault(scope, {}) if scope else self._global
            table[key] = provider
            self.generation += 1
        return key

    def unregister(self, name: str, scope: str | None = None) -> None:
        with self._lock:
            table = self._scoped.get(scope, {}) if scope else self._global
            if table.pop(name.strip().lower(), None) is not None:
                self.generation += 1

    def get(self, name: str, scope: str | None = None) -> Any | None:
        key = name.strip().lower()
        with self._lock:
            if scope and key in self._scoped.get(scope, {}):
                return self._scoped[scope][key]
            return self._global.get(key)

    def names(self) -> list[str]:
        with self._lock:
            return sorted({*self._global, *(k for t in self._scoped.values() for k in t)})

    def strip_env_keys(self) -> frozenset[str]:
        """Union of every provider's strip_env_keys; a raising provider adds nothing."""
        keys: set[str] = set()
        with self._lock:
            providers = [*self._global.values(), *(p for t in self._scoped.values() for p in t.values())]
        for provider in providers:
            try:
                keys |= {str(k) for k in provider.strip_env_keys}
            except Exception:
                continue
        return frozenset(keys)

    def provider_flag(self, name: str, attr: str, default: Any) -> Any:
        provider = self.get(name)
        if provider is None:
            return default
        try:
            return getattr(provider, attr)
        except Exception:
            return default


@dataclass
class Registration:
    """The handle a successful registration returns; unload restores the previous one."""

    registry: ProviderRegistry
    key: str
    scope: str | None

    def unregister(self) -> None:
        self.registry.unregister(self.key, self.scope)


@dataclass
class PluginContext:
    """What register(ctx) receives on a host with the provider ABI."""

    registry: ProviderRegistry
    plugin_name: str = "plugin"
    config: dict[str, Any] = field(default_factory=dict)  # the plugin's settings (--backend-config settings:)
    scope: str | None = None
    accepted: list[Any] = field(default_factory=list)
    rejected: list[tuple[Any, str]] = field(default_factory=list)
    other_calls: list[str] = field(default_factory=list)
    unknown_names: list[str] = field(default_factory=list)  # register_* names Hermes does not have

    def register_terminal_environment_provider(self, provider: Any) -> Registration | None:
        try:
            key = self.registry.register(provider, self.scope)
        except (TypeError, ValueError) as exc:
            logger.warning("plugin %s: terminal provider rejected: %s", self.plugin_name, exc)
            self.rejected.append((provider, str(exc)))
            return None
        self.accepted.append(provider)
        return Registration(self.registry, key, self.scope)

    def get_config(self, key: str, default: Any = None) -> Any:
        """The plugin's setting at the dotted, plugin-relative ``key`` ("endpoint", "retry.policy"), or
        ``default``; as Hermes's PluginContext.get_config, a key that is not plugin-relative is a ValueError."""
        segments = key.split(".") if isinstance(key, str) else []
        if not segments or "/" in key or "\\" in key or not all(_SETTING_SEGMENT.fullmatch(s) for s in segments):
            raise ValueError(
                f"ctx.get_config({key!r}): expected a plugin-relative settings key such as 'endpoint' or 'retry.policy'"
            )
        current: Any = self.config
        for segment in segments:
            if not isinstance(current, Mapping) or segment not in current:
                return default
            current = current[segment]
        return copy.deepcopy(current)

    def __getattr__(self, name: str) -> Callable[..., None]:
        # Hermes's other register_* hooks (tools, commands, hooks) are accepted and ignored; a name
        # Hermes does not have is an AttributeError naming the closest valid one, as on Hermes.
        if name in HERMES_REGISTER_NAMES:

            def ignore(*_args: Any, **_kwargs: Any) -> None:
                self.other_calls.append(name)

            return ignore
        if name.startswith("register_"):
            self.unknown_names.append(name)
            raise AttributeError(unknown_register_name(name))
        raise AttributeError(name)


class LegacyPluginContext:
    """The context of a host without the provider ABI (hermes-agent 0.19.0)."""

    def __init__(self, plugin_name: str = "plugin") -> None:
        self.plugin_name = plugin_name
        self.other_calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("register_") and name != "register_terminal_environment_provider":

            def ignore(*_args: Any, **_kwargs: Any) -> None:
                self.other_calls.append(name)

            return ignore
        raise AttributeError(f"'PluginContext' object has no attribute {name!r}")

"""Load a backend the way Hermes loads plugins.

A backend spec is one of:

- a known name (``tempdir_box``; see conformance.backends);
- a path to a plugin directory (plugin.yaml + __init__.py with register(ctx));
- ``ep:NAME``: the entry point NAME in the ``hermes_agent.plugins`` group;
- ``hermes:local`` or ``hermes:ssh``: hermes-agent's own built-in environment
  (conformance.hermes_builtins);
- ``package.module`` (a plugin package) or ``package.module:attr`` where attr is
  a provider instance, a provider class or a register(ctx) function.

Plugins are imported as packages and their register(ctx) is called with a
PluginContext, while the loader records what a validator would: time taken,
network attempts, and any change to Hermes's own modules.  Importing and
registering run on their own thread with a deadline: a plugin that never
returns is a LoadError naming the deadline, not a hung run.  Every LoadError
is one line that names what is wrong and what to do.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.errors import BackendLoadError, PluginManifestError, file_problem, yaml_problem
from conformance.host import abi, gaps, hermes_names
from conformance.host.calls import CallHung, bounded
from conformance.host.netguard import network_guard
from conformance.host.registry import PluginContext, ProviderRegistry, provider_base_class

ENTRY_POINT_GROUP = "hermes_agent.plugins"
CORE_PREFIXES = ("agent", "tools", "hermes_cli", "hermes_constants")
LOAD_DEADLINE_S = 60.0  # importing the plugin and calling register(ctx)


# The name the kit and its tests have used for a backend that cannot be loaded.
LoadError = BackendLoadError


@dataclass
class LoadedPlugin:
    spec: str
    source: str  # directory | module | entry-point | object
    provider: Any
    module: types.ModuleType | None = None
    manifest: dict[str, Any] | None = None
    manifest_path: Path | None = None
    entry_point: str | None = None
    distribution: str | None = None
    distribution_version: str | None = None
    register: Any = None
    context: PluginContext | None = None
    load_seconds: float = 0.0
    network_attempts: list[str] = field(default_factory=list)
    core_changes: list[str] = field(default_factory=list)

    @property
    def is_package(self) -> bool:
        return self.register is not None

    @property
    def plugin_name(self) -> str | None:
        if self.entry_point:
            return self.entry_point
        return (self.manifest or {}).get("name")

    @property
    def version(self) -> str | None:
        return (self.manifest or {}).get("version") or self.distribution_version


def _core_snapshot() -> dict[str, tuple[int, dict[str, int]]]:
    """Ids of every core module, its attributes, and the members of its own classes."""
    snap = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in CORE_PREFIXES:
            continue
        attrs: dict[str, int] = {}
        for key, value in list(vars(module).items()):
            attrs[key] = id(value)
            if isinstance(value, type) and value.__module__ == getattr(module, "__name__", name):
                for member, impl in list(vars(value).items()):
                    attrs[f"{key}.{member}"] = id(impl)
        snap[name] = (id(module), attrs)
    return snap


def _core_diff(before: dict[str, tuple[int, dict[str, int]]]) -> list[str]:
    after = _core_snapshot()
    changes = []
    new_modules = set(after) - set(before)
    for name in sorted(new_modules):
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if spec is None or not getattr(spec, "origin", None):
            changes.append(f"module {name} inserted without being imported from a file")
    for name, (mod_id, attrs) in before.items():
        if name not in after:
            changes.append(f"module {name} removed")
            continue
        if after[name][0] != mod_id:
            changes.append(f"module {name} replaced")
            continue
        now = after[name][1]
        for attr, value_id in attrs.items():
            if attr.startswith("__") or ".__" in attr:
                continue
            if attr not in now:
                changes.append(f"{name}.{attr} removed")
            elif now[attr] != value_id:
                changes.append(f"{name}.{attr} replaced")
        for attr in set(now) - set(attrs):
            if f"{name}.{attr}" not in new_modules and not attr.startswith("__") and ".__" not in attr:
                changes.append(f"{name}.{attr} added")
    return changes


def read_manifest(directory: Path) -> dict[str, Any] | None:
    path = directory / "plugin.yaml"
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise PluginManifestError(
            f"cannot read {path} ({file_problem(exc)})", "make plugin.yaml a readable UTF-8 YAML file"
        ) from None
    except yaml.YAMLError as exc:
        raise PluginManifestError(
            f"{path} is not valid YAML ({yaml_problem(exc)})",
            "fix the file: a plugin.yaml is a mapping of name, version, description and kind",
        ) from None
    if not isinstance(data, dict):
        raise PluginManifestError(
            f"{path} must hold a mapping (name, version, description, kind), not a {type(data).__name__}",
            "fix the file",
        )
    return data


def declared_requires_hermes(spec: str) -> str | None:
    """The ``requires_hermes`` of the plugin.yaml beside ``spec``'s package, found without importing the
    plugin (the host is chosen from it before anything of the plugin runs); None when there is none."""
    directory: Path | None = None
    path = Path(spec).expanduser()
    try:
        if "/" in spec or path.is_dir():
            directory = path
        else:
            entry_point = spec.startswith(("ep:", "entry-point:"))
            module = spec.split(":", 1)[1] if entry_point else spec.partition(":")[0]
            if entry_point:
                points = importlib.metadata.entry_points(group="hermes_agent.plugins")
                found = [ep for ep in points if ep.name == module]
                module = found[0].value.partition(":")[0] if found else ""
            located = importlib.util.find_spec(module) if module else None
            if located is not None and located.origin:
                directory = Path(located.origin).parent
        manifest = read_manifest(directory) if directory is not None and directory.is_dir() else None
    except Exception:
        return None  # the load itself says what is wrong with the spec or its plugin.yaml
    value = manifest.get("requires_hermes") if isinstance(manifest, dict) else None
    return value.strip() if isinstance(value, str) and value.strip() else None


def _import_directory(directory: Path) -> types.ModuleType:
    init = directory / "__init__.py"
    if not init.is_file():
        raise LoadError(
            f"{directory} has no __init__.py",
            "make the directory a Python package: a Hermes "
            "plugin is __init__.py with register(ctx) next to plugin.yaml",
        )
    safe = "".join(ch if ch.isalnum() else "_" for ch in directory.name)
    name = f"hermes_plugins.{safe}"
    if "hermes_plugins" not in sys.modules:
        ns = types.ModuleType("hermes_plugins")
        ns.__path__ = []
        sys.modules["hermes_plugins"] = ns
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(directory)])
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {init}", "check that the file is a readable Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise _during_import(exc)
    return module


def _during_import(exc: Exception) -> Exception:
    exc._kit_during = "import"  # type: ignore[attr-defined]
    return exc


def _module_dir(module: types.ModuleType) -> Path | None:
    path = getattr(module, "__file__", None)
    return Path(path).parent if path else None


# What a private home replaces while a plugin is imported and registered.
HOME_VARIABLES = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR")


@contextlib.contextmanager
def private_home(root: Path | None) -> Iterator[None]:
    """``HOME`` and the XDG directories under ``root`` while inside (None: left as they are), so a
    plugin's import or register(ctx) that writes "under ~" writes into the run's own tree, never the
    user's; put back afterwards."""
    if root is None:
        yield
        return
    saved = {name: os.environ.get(name) for name in HOME_VARIABLES}
    home = Path(root)
    places = {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_RUNTIME_DIR": home / ".run",
    }
    for name, place in places.items():
        place.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.environ[name] = str(place)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load(
    spec: str,
    registry: ProviderRegistry,
    *,
    config: dict[str, Any] | None = None,
    deadline: float = LOAD_DEADLINE_S,
    home: Path | None = None,
) -> LoadedPlugin:
    """Import the backend named by ``spec`` and register its provider, within ``deadline`` seconds, with
    ``home`` (when given) as HOME and the XDG directories meanwhile (``private_home``)."""
    before = _core_snapshot()
    started = time.perf_counter()
    context = contextvars.copy_context()
    with private_home(home), network_guard() as attempts:
        try:
            loaded = bounded(
                lambda: context.run(_load, spec, registry, config or {}),
                deadline=deadline,
                what=f"loading backend {spec!r} (import and register(ctx))",
            )
        except LoadError:
            raise
        except CallHung as exc:
            raise LoadError(str(exc), "register(ctx) must only register the provider: no network, no waiting") from None
        except Exception as exc:
            gap = gaps.missing_hermes_module(exc)
            if gap is not None:
                host = abi.active()
                what, fix = gaps.load_error(
                    spec,
                    gap,
                    host.mode if host else None,
                    host.hermes_version if host else None,
                    where="importing it" if _import_failed(exc) else "register(ctx)",
                )
                raise LoadError(what, fix) from exc
            if _import_failed(exc) and isinstance(exc, ModuleNotFoundError) and exc.name:
                own = exc.name.split(".")[0] == spec.replace("ep:", "").split(":")[0].split(".")[0]
                fix = (
                    f"the plugin's own module {exc.name!r} is missing: reinstall the package, or fix the import"
                    if own
                    else f"install what provides the module {exc.name!r} if the backend needs it (its vendor "
                    "SDK, often the plugin's pip extra); a package that patches Hermes's own files instead of "
                    "registering a provider is no plugin the kit (or Hermes's plugin loader) can load"
                )
                where = "importing it"
            elif (unknown := gaps.unknown_hermes_name(exc)) is not None:
                module, name = unknown
                where = "importing it" if _import_failed(exc) else "register(ctx)"
                raise LoadError(
                    f"loading backend {spec!r} failed in {where}: it imports {name!r} from the Hermes module "
                    f"{module!r}, which no Hermes release the kit knows has "
                    f"({', '.join(hermes_names.releases())}): the plugin's own error, not the host's",
                    f"fix the import (a misspelt name, or one the plugin should define itself); "
                    f"`python -c 'import {module}; print(dir({module}))'` under Hermes lists what it has",
                ) from exc
            elif _import_failed(exc):
                fix = "fix the import error (importing the plugin's module by hand shows the traceback)"
                where = "importing it"
            else:
                fix = "fix register(ctx): it must call ctx.register_terminal_environment_provider(provider) and return"
                where = "register(ctx)"
            raise LoadError(
                f"loading backend {spec!r} failed in {where}: {type(exc).__name__}: {_one_line(str(exc))}", fix
            ) from exc
    loaded.load_seconds = time.perf_counter() - started
    loaded.network_attempts = list(attempts)
    loaded.core_changes = _core_diff(before)
    return loaded


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _import_failed(exc: BaseException) -> bool:
    """Did ``exc`` come out of importing the plugin (rather than out of register(ctx))?"""
    return getattr(exc, "_kit_during", None) == "import"


def _load(spec: str, registry: ProviderRegistry, config: dict[str, Any]) -> LoadedPlugin:
    from conformance import hermes_builtins

    kind = hermes_builtins.kind_of(spec)
    if kind is not None:
        return _from_object(spec, hermes_builtins, hermes_builtins.provider(kind, config), registry, config)
    if spec.startswith(("ep:", "entry-point:")):
        return _load_entry_point(spec, spec.split(":", 1)[1], registry, config)
    path = Path(spec).expanduser()
    if "/" in spec or path.is_dir():
        if not path.is_dir():
            raise LoadError(
                f"{spec} is not a directory",
                "give a plugin directory (plugin.yaml and __init__.py), "
                "package.module:attr, ep:NAME or a name from `hermes-backend-kit backends`",
            )
        module = _import_directory(path.resolve())
        return _from_package(spec, "directory", module, read_manifest(path.resolve()), registry, config)
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise LoadError(
                f"no module {module_name!r}",
                "give a known backend name (`hermes-backend-kit "
                "backends`), a plugin directory, package.module:attr or ep:NAME",
            ) from None
        raise _during_import(exc)
    except Exception as exc:
        raise _during_import(exc)
    if not attr:
        if not callable(getattr(module, "register", None)):
            raise LoadError(
                f"module {module_name} has no register(ctx)",
                f"name the provider as {module_name}:ATTR; a package that patches Hermes's files instead of "
                "registering a provider cannot be loaded as a backend (docs/certify-your-plugin.md: the plugin API)",
            )
        directory = _module_dir(module)
        manifest = read_manifest(directory) if directory and (module.__file__ or "").endswith("__init__.py") else None
        return _from_package(spec, "module", module, manifest, registry, config)
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise LoadError(
            f"module {module_name} has no attribute {attr!r}",
            f"name a provider instance, a provider class or register(ctx) in {module_name}",
        ) from None
    return _from_object(spec, module, target, registry, config)


def _from_package(
    spec: str,
    source: str,
    module: types.ModuleType,
    manifest: dict[str, Any] | None,
    registry: ProviderRegistry,
    config: dict[str, Any],
    register: Any = None,
) -> LoadedPlugin:
    register = register or getattr(module, "register", None)
    if not callable(register):
        raise LoadError(
            f"{spec}: the plugin package has no register(ctx) function", "define register(ctx) in its __init__.py"
        )
    name = str((manifest or {}).get("name") or module.__name__)
    ctx = PluginContext(registry=registry, plugin_name=name, config=dict(config.get("plugin_settings") or {}))
    register(ctx)
    if not ctx.accepted:
        why = (
            "; ".join(reason for _, reason in ctx.rejected)
            or "it never called ctx.register_terminal_environment_provider"
        )
        if ctx.unknown_names:
            from conformance.host.registry import unknown_register_name

            why = "; ".join(unknown_register_name(n) for n in dict.fromkeys(ctx.unknown_names))
        kind = (manifest or {}).get("kind")
        if ctx.other_calls and not ctx.rejected and not ctx.unknown_names and kind != "backend":
            # A plugin of another kind (tools, commands, hooks): nothing to certify, nothing to fix.
            calls = ", ".join(dict.fromkeys(ctx.other_calls))
            raise LoadError(
                f"{spec} is not a terminal backend: its register(ctx) called {calls}"
                + (f" (plugin.yaml kind: {kind})" if kind else "")
                + ", and no terminal provider",
                "the kit certifies terminal backends (plugins that call ctx.register_terminal_environment_provider); "
                "give it one of those",
            )
        raise LoadError(
            f"{spec}: register(ctx) registered no terminal provider ({why})",
            "call ctx.register_terminal_environment_provider(provider) in register(ctx)",
        )
    return LoadedPlugin(
        spec=spec,
        source=source,
        provider=ctx.accepted[0],
        module=module,
        manifest=manifest,
        register=register,
        context=ctx,
        manifest_path=(_module_dir(module) or Path(".")) / "plugin.yaml" if manifest else None,
    )


def _from_object(
    spec: str, module: types.ModuleType, target: Any, registry: ProviderRegistry, config: dict[str, Any]
) -> LoadedPlugin:
    base = provider_base_class()
    if inspect.isclass(target) and issubclass(target, base):
        target = target()
    if isinstance(target, base):
        registry.register(target)
        return LoadedPlugin(spec=spec, source="object", provider=target, module=module)
    if inspect.isclass(target):
        # A class is never register(ctx): calling it would only construct it.
        raise LoadError(
            f"{spec} names the class {target.__name__}, which is not a TerminalEnvironmentProvider subclass",
            f"name the provider class (a subclass of agent.terminal_env_provider.{base.__name__}, as a plugin "
            "imports it), an instance of it, or "
            "the plugin's register(ctx) function",
        )
    if callable(target):
        manifest = None
        directory = _module_dir(module)
        if directory and getattr(module, "__file__", "").endswith("__init__.py"):
            manifest = read_manifest(directory)
        return _from_package(spec, "module", module, manifest, registry, config, register=target)
    raise LoadError(
        f"{spec} is neither a TerminalEnvironmentProvider, a provider class nor a register(ctx) function",
        "name a provider instance, a provider class or register(ctx)",
    )


def _load_entry_point(spec: str, name: str, registry: ProviderRegistry, config: dict[str, Any]) -> LoadedPlugin:
    matches = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        known = sorted(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        raise LoadError(
            f"no {ENTRY_POINT_GROUP} entry point named {name!r} (installed: {', '.join(known) or 'none'})",
            "install the plugin's distribution (pip install ...) or name an installed entry point",
        )
    ep = matches[0]
    try:
        target = ep.load()
    except Exception as exc:
        raise _during_import(exc)
    if isinstance(target, types.ModuleType):
        directory = _module_dir(target)
        loaded = _from_package(
            spec, "entry-point", target, read_manifest(directory) if directory else None, registry, config
        )
    else:
        loaded = _from_object(spec, sys.modules[ep.module], target, registry, config)
        loaded.source = "entry-point"
    loaded.entry_point = ep.name
    if ep.dist is not None:
        loaded.distribution = ep.dist.metadata["Name"]
        loaded.distribution_version = ep.dist.version
    return loaded

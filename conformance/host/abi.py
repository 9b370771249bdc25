"""Choose the host a run uses and make Hermes's import names resolve.

- ``hermes``: the installed hermes-agent modules; the kit supplies only the
  modules (and exception names) the installed version lacks, detected by
  import, never by version string.
- ``builtin``: the kit's clean-room stand-ins for every module a plugin
  imports, registered under Hermes's names.
- ``auto``: hermes when importable, builtin otherwise.

Modules are process-global, so a process runs one host; the choice is final.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import HostError

HOST_MODES = ("auto", "builtin", "hermes")

# Hermes import name -> the kit's stand-in module.
STANDINS: dict[str, str] = {
    "hermes_constants": "conformance.host.standins.hermes_constants",
    "hermes_cli.config": "conformance.host.standins.hermes_cli_config",
    "agent.file_safety": "conformance.host.standins.file_safety",
    "agent.provider_base": "conformance.host.standins.provider_base",
    "agent.terminal_env_provider": "conformance.host.standins.terminal_env_provider",
    "agent.secret_scope": "conformance.host.standins.secret_scope",
    "agent.deadline": "conformance.host.standins.deadline",
    "tools.interrupt": "conformance.host.standins.interrupt",
    "tools.terminal_tool": "conformance.host.standins.terminal_tool",
    "tools.environments.base_output": "conformance.host.standins.base_output",
    "tools.environments.base": "conformance.host.standins.base",
    "tools.environments.file_sync": "conformance.host.standins.file_sync",
    "tools.env_passthrough": "conformance.host.standins.env_passthrough",
    "tools.environments.remote_common": "conformance.host.standins.remote_common",
}
_PACKAGES = ("agent", "tools", "tools.environments", "hermes_cli")
# Names a current host exports that older ones lack; supplied into the real module.
_BASE_NAMES = ("EnvironmentConnectionError", "FileFetchError")
_BASE_OUTPUT_NAMES = ("ProcessHandle", "_ThreadedProcessHandle", "_popen_bash", "_pipe_stdin")


@dataclass
class HostInfo:
    mode: str
    requested: str
    hermes_version: str | None = None
    shimmed: list[str] = field(default_factory=list)
    note: str | None = None  # why the host is not the one asked for (--host auto)
    distribution: str | None = None  # the installed tree's distribution (hermes-agent, or a packaging of it)
    where: str | None = None  # the directory the tree is imported from

    def to_dict(self) -> dict[str, object]:
        found: dict[str, object] = {
            "mode": self.mode,
            "requested": self.requested,
            "hermes_version": self.hermes_version,
            "shimmed": list(self.shimmed),
        }
        if self.distribution:
            found["distribution"] = self.distribution
        if self.where:
            found["where"] = self.where
        if self.note:
            found["note"] = self.note
        return found


@dataclass(frozen=True)
class Tree:
    """An installed Hermes tree as found on the path, nothing of it imported."""

    version: str | None  # from the tree's own source, else its distribution's metadata
    distribution: str | None  # hermes-agent, or a packaging of it under another name
    where: str


_VERSION_LITERAL = re.compile(r"""^(?:__version__|_FALLBACK_VERSION)\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.M)


def version_in_source(init: Path) -> str | None:
    """The version a Hermes tree's ``hermes_cli/__init__.py`` states, read as text (nothing imported)."""
    try:
        found = _VERSION_LITERAL.search(init.read_text("utf-8", "replace"))
    except OSError:
        return None
    return found.group(1) if found else None


def installed_tree() -> Tree | None:
    """The Hermes tree this Python would import (its ``hermes_cli`` package), or None."""
    if "hermes_cli" in sys.modules:
        origin = getattr(sys.modules["hermes_cli"], "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec("hermes_cli")
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
    if not origin:
        return None
    version = version_in_source(Path(origin))
    distribution = next(iter(importlib.metadata.packages_distributions().get("hermes_cli") or []), None)
    if version is None and distribution is not None:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = None
    return Tree(version, distribution, str(Path(origin).resolve().parent.parent))


def meets(version: str | None, requires: str | None) -> bool | None:
    """Does ``version`` satisfy the specifier ``requires`` (">=0.21.3")?  None when either is missing or
    cannot be read."""
    if not version or not requires:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return SpecifierSet(requires).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


_active: HostInfo | None = None


def active() -> HostInfo | None:
    return _active


def install(mode: str = "auto", *, requires: str | None = None, ignore_requires: bool = False) -> HostInfo:
    """Set up the host once per process; later calls must ask for the same mode.

    ``requires``: the plugin's ``requires_hermes``.  An installed Hermes that does not meet it is never
    the host: ``auto`` takes the builtin host and says why, ``hermes`` is a usage error.  With
    ``ignore_requires`` (certify's --ignore-requires-hermes, for comparing hosts) it is the host all the
    same, and the host's note says so.
    """
    global _active
    if mode not in HOST_MODES:
        raise HostError(f"unknown host {mode!r}", f"use one of {', '.join(HOST_MODES)}")
    too_old = _too_old(requires) if mode != "builtin" and _active is None else None
    if too_old is not None and ignore_requires:
        info = install(mode)
        if info.mode == "hermes":
            info.note = (
                f"the installed Hermes {too_old.version} does not meet the plugin's requires_hermes {requires!r}; "
                "judged on it all the same (--ignore-requires-hermes)"
            )
        return info
    if too_old is not None and mode == "hermes":
        raise HostError(
            f"--host hermes: the installed Hermes {too_old.version} ({too_old.distribution or 'its tree'} at "
            f"{too_old.where}) does not meet the plugin's requires_hermes {requires!r}",
            "install a Hermes release the plugin supports, or run it on the kit's stand-ins with --host builtin",
        )
    if too_old is not None:
        info = _install_builtin(requested="auto")
        info.note = (
            f"--host auto: the installed Hermes {too_old.version} does not meet the plugin's requires_hermes "
            f"{requires!r}; the builtin host runs it instead"
        )
        _active = info
        return info
    if _active is not None:
        if mode not in ("auto", _active.mode):
            raise HostError(
                f"this process already runs the {_active.mode!r} host", f"start a new process for --host {mode}"
            )
        return _active
    if mode == "builtin":
        info = _install_builtin()
    elif mode == "hermes":
        info = _install_hermes(requested="hermes")
    else:
        try:
            info = _install_hermes(requested="auto")
        except HostError:
            info = _install_builtin(requested="auto")
    _active = info
    return info


def _too_old(requires: str | None) -> Tree | None:
    """The installed tree, when there is one and its version does not meet ``requires``."""
    tree = installed_tree() if requires else None
    return tree if tree is not None and meets(tree.version, requires) is False else None


def _hermes_importable() -> str | None:
    """Return why hermes-agent cannot serve as the host, or None if it can."""
    try:
        base = importlib.import_module("tools.environments.base")
        importlib.import_module("hermes_cli")
    except Exception as exc:  # any import failure means "not this host"
        return f"{type(exc).__name__}: {exc}"
    if not hasattr(base, "BaseEnvironment"):
        return "tools.environments.base has no BaseEnvironment"
    return None


def _install_hermes(requested: str) -> HostInfo:
    problem = _hermes_importable()
    if problem is not None:
        raise HostError(
            f"--host hermes needs an importable hermes-agent ({problem})",
            "install it with `pip install 'hermes-backend-kit[hermes]'` or use --host builtin",
        )
    tree = installed_tree()  # the version from the tree's own source, whatever its distribution is called
    version = tree.version if tree is not None else None
    if version is None:
        version = getattr(sys.modules.get("hermes_cli"), "__version__", None)
    info = HostInfo(
        mode="hermes",
        requested=requested,
        hermes_version=version,
        distribution=tree.distribution if tree is not None else None,
        where=tree.where if tree is not None else None,
    )
    base = importlib.import_module("tools.environments.base")
    for name, standin in STANDINS.items():
        if name == "tools.environments.base_output":
            _ensure_base_output(base, info)
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            module = importlib.import_module(standin)
            module.__kit_standin__ = True  # type: ignore[attr-defined]
            _register(name, module)
            info.shimmed.append(name)
    standin_base = importlib.import_module(STANDINS["tools.environments.base"])
    for attr in _BASE_NAMES:
        if not hasattr(base, attr):
            setattr(base, attr, getattr(standin_base, attr))
            info.shimmed.append(f"tools.environments.base.{attr}")
    return info


def _ensure_base_output(base: types.ModuleType, info: HostInfo) -> None:
    """Older hosts keep the process-handle helpers in base.py; alias them."""
    try:
        importlib.import_module("tools.environments.base_output")
        return
    except ModuleNotFoundError:
        pass
    module = types.ModuleType("tools.environments.base_output")
    module.__doc__ = "Kit alias: the installed host keeps these names in tools.environments.base."
    for attr in _BASE_OUTPUT_NAMES:
        if hasattr(base, attr):
            setattr(module, attr, getattr(base, attr))
    _register("tools.environments.base_output", module)
    info.shimmed.append("tools.environments.base_output")


def _install_builtin(requested: str = "builtin") -> HostInfo:
    clash = [
        n for n in (*_PACKAGES, *STANDINS) if n in sys.modules and not getattr(sys.modules[n], "__kit_standin__", False)
    ]
    if clash:
        raise HostError(
            f"Hermes modules are already imported ({', '.join(sorted(clash))}), so the builtin "
            "host cannot replace them",
            "use --host hermes, or run in a fresh process",
        )
    for pkg in _PACKAGES:
        module = types.ModuleType(pkg)
        module.__path__ = []  # a package with nothing on disk: only stand-ins resolve
        module.__kit_standin__ = True  # type: ignore[attr-defined]
        _register(pkg, module)
    for name, standin in STANDINS.items():
        module = importlib.import_module(standin)
        module.__kit_standin__ = True  # type: ignore[attr-defined]
        _register(name, module)
    return HostInfo(mode="builtin", requested=requested, shimmed=sorted(STANDINS))


def _register(name: str, module: types.ModuleType) -> None:
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, module)

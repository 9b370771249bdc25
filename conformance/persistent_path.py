"""The directory a persistent backend keeps: where the persistence checks write what must survive.

Vendors keep different parts of a sandbox across a stop: some keep the whole
filesystem, others only the workspace (a snapshot of /workspace, say) while
$HOME and /tmp start empty again.  A persistence check writes its file in the
directory the backend declares it keeps, so a backend is judged by its own
promise and never for wiping a directory it never promised to keep.

The first of these that names a path speaks for the backend (the same order
as declared capabilities, conformance.capabilities):

- ``persistent_path`` in --backend-config;
- the provider's ``conformance_persistent_path`` attribute;
- ``conformance: persistent_path:`` in plugin.yaml.

A path is absolute inside the sandbox, or ``~`` / ``~/sub`` for the
sandbox's $HOME.  Nothing declared: the environment's cwd, the directory
Hermes starts every command in (terminal.cwd, else the backend's default).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from conformance.errors import PersistentPathError

ATTRIBUTE = "conformance_persistent_path"
KEY = "persistent_path"


@dataclass(frozen=True)
class PersistentPath:
    path: str  # as declared, or the environment's cwd
    declared_by: str  # "backend-config persistent_path", ..., or "default: the environment's cwd"

    def shell(self) -> str:
        """The directory as one shell word (``~`` becomes "$HOME")."""
        if self.path == "~":
            return '"$HOME"'
        if self.path.startswith("~/"):
            return '"$HOME"/' + shlex.quote(self.path[2:])
        return shlex.quote(self.path)

    def file(self, name: str) -> str:
        """A file directly in the directory, as one shell word."""
        return f"{self.shell()}/{shlex.quote(name)}"

    def describe(self) -> str:
        return f"{self.path} ({self.declared_by})"


def checked(value: Any, where: str) -> str:
    """``value`` if it is a usable persistent path; PersistentPathError naming ``where`` otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise PersistentPathError(
            f"the {where} must be a non-empty path string, got {value!r}",
            "name the directory the sandbox keeps across cleanup, e.g. /workspace",
        )
    if not (value.startswith("/") or value == "~" or value.startswith("~/")) or "\n" in value or "\0" in value:
        raise PersistentPathError(
            f"the {where} {value!r} must be an absolute path inside the sandbox or ~ / ~/sub "
            "for its $HOME, on one line",
            "write it as /workspace, ~ or ~/sub",
        )
    return value


def declared(kit: Any) -> PersistentPath | None:
    """The path the backend declares it keeps, or None when it declares none."""
    config_value = getattr(getattr(kit, "backend_config", None), KEY, None)
    if config_value is not None:
        return PersistentPath(checked(config_value, f"--backend-config {KEY}"), f"backend-config {KEY}")
    try:
        attr = getattr(kit.provider, ATTRIBUTE, None)
    except Exception:
        attr = None
    if attr is not None:
        return PersistentPath(checked(attr, f"provider attribute {ATTRIBUTE}"), f"provider attribute {ATTRIBUTE}")
    manifest = getattr(getattr(kit, "plugin", None), "manifest", None) or {}
    section = manifest.get("conformance") if isinstance(manifest, dict) else None
    if isinstance(section, dict) and section.get(KEY) is not None:
        return PersistentPath(checked(section[KEY], f"plugin.yaml conformance.{KEY}"), f"plugin.yaml conformance.{KEY}")
    return None


def of(kit: Any, env: Any) -> PersistentPath:
    """The directory the persistence checks use for ``env``: the declared one, else ``env``'s cwd."""
    found = declared(kit)
    if found is not None:
        return found
    cwd = getattr(env, "cwd", None)
    if isinstance(cwd, str) and cwd.startswith("/"):
        return PersistentPath(cwd, "default: the environment's cwd")
    return PersistentPath("~", "default: the sandbox's $HOME (the environment has no absolute cwd)")

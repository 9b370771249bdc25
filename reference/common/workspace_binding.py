"""The host workspace binding a container provider may receive, checked before anything is created.

Hosts that bind a task's or session's host workspace pass
``workspace_binding=WorkspaceBinding(host_path, source)`` to create_environment
(None when there is none).  It is context, not permission: the reference
backends run in a vendor's cloud, so their policy is to mount and sync nothing
from it.  A value that is not a binding, or a binding with a relative host path
or an unknown source, is refused before a sandbox exists, so a caller's mistake
never turns into a sandbox with the wrong workspace.
"""

from __future__ import annotations

import importlib
import posixpath
from typing import Any

SOURCES = frozenset({"session", "task", "process", "factory"})


def _host_class() -> type | None:
    try:
        return getattr(importlib.import_module("agent.terminal_env_provider"), "WorkspaceBinding", None)
    except ImportError:
        return None


def check(binding: Any, backend: str) -> None:
    """Raise TypeError/ValueError naming workspace_binding unless ``binding`` is None or a valid binding."""
    if binding is None:
        return
    host_class = _host_class()
    if host_class is not None and not isinstance(binding, host_class):
        raise TypeError(
            f"{backend}: workspace_binding must be an agent.terminal_env_provider.WorkspaceBinding "
            f"or None, not {type(binding).__name__}"
        )
    path, source = getattr(binding, "host_path", None), getattr(binding, "source", None)
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or "\x00" in path
        or (path != "/" and posixpath.normpath(path) != path.rstrip("/"))
    ):
        raise ValueError(f"{backend}: workspace_binding.host_path must be a normalised absolute path, not {path!r}")
    if source not in SOURCES:
        raise ValueError(f"{backend}: workspace_binding.source must be one of {sorted(SOURCES)}, not {source!r}")

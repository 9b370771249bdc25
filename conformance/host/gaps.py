"""A backend that imports a Hermes module the running host does not have: the host's gap.

The builtin host offers stand-ins for the Hermes modules terminal backends are
known to import (docs/host-surface.md); the hermes host offers what the
installed hermes-agent has.  When a backend imports another Hermes module, its
code cannot run here, which says nothing about the backend.  So:

- while the plugin is imported (``loader.load``), the run stops with one setup
  error naming the module (``load_error``);
- when a backend call imports it later (create_environment(), execute() ...),
  each check that hit it is reported unverified because of the host
  (``unverified_reason``), never failed, and the run's report carries one note
  per missing module (``note``) under ``host.gaps``.

``missing_hermes_module`` decides whether an exception is such a gap: a
ModuleNotFoundError (anywhere in its cause/context chain, or quoted in the
message of an exception that wrapped it) for a module under one of Hermes's
own top-level packages, or an ImportError for a name such a module lacks here
that a released Hermes has (``hermes_names``: the gap is then ``module:name``).
A missing vendor SDK, a plugin's own module, or a name no recorded release
has is not a host gap: that stays the backend's failure.
"""

from __future__ import annotations

import re

from conformance.host import hermes_names

# Hermes 0.21's own top-level modules (hermes_constants.FIRST_PARTY_MODULE_ROOTS, plus its
# hermes_* modules), without the generic names ("utils", "cli", "plugins", "providers") that a
# plugin's own modules could also have.  ``hermes_plugins`` is where Hermes and the kit load
# directory plugins: a module missing there is the plugin's own.
HERMES_ROOTS = frozenset(
    {
        "agent",
        "tools",
        "hermes_cli",
        "hermes_constants",
        "hermes_yaml",
        "gateway",
        "cron",
        "toolsets",
        "model_tools",
        "run_agent",
        "tui_gateway",
        "acp_adapter",
    }
)
_NO_MODULE = re.compile(r"No module named '([A-Za-z_][\w.]*)'")
_NO_NAME = re.compile(r"cannot import name '([A-Za-z_]\w*)' from '([A-Za-z_][\w.]*)'")
_CHAIN_LIMIT = 20


def is_hermes_module(name: str | None) -> bool:
    return bool(name) and str(name).split(".", 1)[0] in HERMES_ROOTS


def missing_hermes_module(exc: BaseException | None) -> str | None:
    """The Hermes module whose absence ``exc`` reports, or None when it is not a host gap."""
    seen: set[int] = set()
    current = exc
    while current is not None and id(current) not in seen and len(seen) < _CHAIN_LIMIT:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and is_hermes_module(current.name):
            return str(current.name)
        for quoted in _NO_MODULE.findall(str(current)):
            if is_hermes_module(quoted):
                return str(quoted)
        for name, module in _NO_NAME.findall(str(current)):
            if is_hermes_module(module) and hermes_names.exporting(module, name):
                return f"{module}:{name}"
        current = current.__cause__ or current.__context__
    return None


def unknown_hermes_name(exc: BaseException | None) -> tuple[str, str] | None:
    """(module, name) when ``exc`` is an import of a name that no recorded Hermes release has from a
    module the kit records: the plugin's own mistake, whatever host runs it."""
    text = str(exc) if exc is not None else ""
    for name, module in _NO_NAME.findall(text):
        if hermes_names.recorded(module) and not hermes_names.exporting(module, name):
            return module, name
    return None


def described(gap: str) -> str:
    """``module`` as "the Hermes module 'm'", ``module:name`` as "'name' from the Hermes module 'm'"."""
    module, _, name = gap.partition(":")
    return f"{name!r} from the Hermes module {module!r}" if name else f"the Hermes module {module!r}"


def _host_words(mode: str | None, version: str | None = None) -> str:
    if mode == "hermes":
        return f"the installed hermes-agent{f' {version}' if version else ''}"
    return "the kit's builtin host"


def _fix(gap: str, mode: str | None) -> str:
    module, _, name = gap.partition(":")
    wanted = f"{module}.{name}" if name else module
    releases = ", ".join(hermes_names.exporting(module, name)) if name else ""
    which = f" (Hermes {releases} has it)" if releases else ""
    if mode == "hermes":
        return f"run under a hermes-agent that has {wanted}{which} (the hermes host uses the installed one)"
    return f"run with --host hermes under a hermes-agent that has {wanted}{which}"


def unverified_reason(module: str, mode: str | None, version: str | None = None) -> str:
    """A check's skip reason (it starts with ``unverified``, so its clause is unverified, not failed)."""
    return (
        f"unverified (host: the backend imports {described(module)}, which "
        f"{_host_words(mode, version)} does not provide; {_fix(module, mode)})"
    )


def note(module: str, mode: str | None, version: str | None = None, checks: int = 0) -> str:
    """The run's one note about a missing module."""
    counted = f"{checks} check(s) could not run and their clauses are unverified" if checks else "checks could not run"
    return (
        f"host gap: the backend imports {described(module)}, which {_host_words(mode, version)} "
        f"does not provide, so {counted}. This is the host's gap, not a backend failure: {_fix(module, mode)}"
    )


def load_error(
    spec: str, module: str, mode: str | None, version: str | None = None, *, where: str = "importing it"
) -> tuple[str, str]:
    """(what, fix) of the setup error for a plugin that needs the missing module while it loads."""
    return (
        f"loading backend {spec!r} failed in {where}: it imports {described(module)}, which "
        f"{_host_words(mode, version)} does not provide (the host's gap, not the backend's)",
        _fix(module, mode),
    )

"""What every reference plugin does the same way: register, report its SDK, answer the prompt probe.

``PROBE_TASK_ID`` is the task id of Hermes's prompt-time probe (the prompt
builder creates an environment under it to describe the backend), named once
for every reference backend.

Imported by the plugins' ``__init__`` before anything of Hermes is: it must
import nothing from Hermes itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from typing import Any

PROBE_TASK_ID = "prompt-backend-probe"


def registrar(backend: str, provider: str) -> Callable[[Any], None]:
    """The plugin's ``register(ctx)``: registers ``provider`` ("module:Class"), imported only when called."""
    module, _, attr = provider.partition(":")

    def load() -> Any:
        return getattr(importlib.import_module(module), attr)()

    def register(ctx: Any) -> None:
        register_provider(ctx, backend, load)

    register.__doc__ = f"Register the {backend} terminal backend with Hermes."
    return register


def register_provider(ctx: Any, backend: str, load: Callable[[], Any]) -> None:
    """Register the provider ``load()`` builds; a Hermes that cannot take it gets a warning, not a crash.

    Hermes reads ``requires_hermes`` for directory plugins only, and one older than the
    terminal provider ABI (PyPI's 0.19.0) not at all: a pip-installed plugin on a release
    below its floor, or on one without the ABI, logs one warning naming the release it
    needs (read from its own plugin.yaml) and registers nothing.
    """
    logger = logging.getLogger(f"reference.{backend}")
    needs = f"Hermes {floor[2:]} or later" if (floor := required_hermes(backend)) else "a newer Hermes"
    try:
        provider = load()
    except ImportError as exc:
        logger.warning(
            "%s needs %s: this Hermes has no terminal backend plugins (%s); not registered. "
            "Upgrade Hermes (hermes update), then run `hermes plugins list`",
            backend,
            needs,
            exc,
        )
        return
    running = _running_release()
    if floor and running and not _abi_stood_in() and _below(running, floor):
        # Hermes reads requires_hermes only for directory plugins; a pip-installed one checks for itself.
        logger.warning(
            "%s needs %s: this is Hermes %s; not registered. Upgrade Hermes (hermes update)",
            backend,
            needs,
            running,
        )
        return
    add = getattr(ctx, "register_terminal_environment_provider", None)
    if add is None:
        logger.warning(
            "%s needs %s: this Hermes cannot register terminal backends; not registered. "
            "Upgrade Hermes (hermes update)",
            backend,
            needs,
        )
        return
    add(provider)


def _running_release() -> str | None:
    """The release of the Hermes this process runs (``hermes_cli.__version__``), None when it says none."""
    import sys

    version = getattr(sys.modules.get("hermes_cli"), "__version__", None)
    return version if isinstance(version, str) and version.strip() else None


def _abi_stood_in() -> bool:
    """Is the provider ABI the conformance kit's stand-in (a kit's run of this plugin, which provides the
    ABI the floor stands for whatever release it runs beside)?"""
    import sys

    return bool(getattr(sys.modules.get("agent.terminal_env_provider"), "__kit_standin__", False))


def _below(release: str, floor: str) -> bool:
    """Is ``release`` older than the ``>=X`` ``floor``?  A release that cannot be read is not."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return False
    try:
        return Version(release) < Version(floor[2:])
    except InvalidVersion:
        return False


def required_hermes(backend: str) -> str | None:
    """The ``requires_hermes`` floor of ``reference.<backend>``'s plugin.yaml (">=0.21.3"), or None."""
    import importlib.resources  # only here: every plugin's __init__ (and Box Lite's daemon) imports this module

    import yaml

    try:
        text = (importlib.resources.files(f"reference.{backend}") / "plugin.yaml").read_text(encoding="utf-8")
        floor = (yaml.safe_load(text) or {}).get("requires_hermes")
    except (OSError, ModuleNotFoundError, yaml.YAMLError, AttributeError):
        return None
    return floor if isinstance(floor, str) and floor.startswith(">=") else None


def sdk_version(module: str, distribution: str) -> str | None:
    """The installed SDK's version; None when it is not installed."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        from importlib.metadata import version

        return version(distribution)
    except Exception:
        return "unknown"


class PromptProbeStub:
    """What the prompt-time probe gets: describing the backend must not create (and bill) a sandbox."""

    def __init__(self, cwd: str, timeout: int, *, says: str):
        self.cwd, self.timeout, self._says = cwd, timeout, says

    def execute(self, command: str, cwd: str = "", **kwargs: Any) -> dict[str, Any]:
        return {"output": self._says, "returncode": 1}

    def cleanup(self, force_remove: bool = False) -> None:
        return None

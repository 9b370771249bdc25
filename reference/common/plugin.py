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

    A Hermes older than the terminal provider ABI (PyPI's 0.19.0) does not read
    ``requires_hermes`` and loads the plugin anyway: the one warning it logs names the
    release the plugin needs, read from the plugin's own plugin.yaml.
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

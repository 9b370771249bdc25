"""Hermes's default working directory, as a plugin backend receives it.

With terminal.cwd unset, Hermes creates every plugin backend's environment with
cwd "/root" and sends "/root" again with each terminal command until the session
has a cwd of its own (tools/terminal_tool.py).  The reference sandboxes have no
usable /root (another user, or a directory that does not survive a stop), so for
them it means "no preference": the environment's own working directory.
"""

from __future__ import annotations

from typing import Any

HERMES_DEFAULT = "/root"
NO_PREFERENCE = ("", HERMES_DEFAULT, "~")  # what a backend may read as "start where you like"


def initial(cwd: str, own: str) -> str:
    """The cwd an environment starts in: ``own`` when Hermes named no directory of its own."""
    return own if cwd in NO_PREFERENCE else cwd


class HermesDefaultCwd:
    """Mixin before BaseEnvironment: ``execute(cmd, cwd="/root")`` runs in the environment's own cwd."""

    def execute(self, command: str, cwd: str = "", **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = super().execute(  # type: ignore[misc]  # the next class is BaseEnvironment
            command, "" if cwd == HERMES_DEFAULT else cwd, **kwargs
        )
        return result

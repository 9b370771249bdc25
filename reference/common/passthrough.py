"""Hermes's passthrough variables inside a remote sandbox.

Skills' required variables and ``terminal.env_passthrough`` are resolved by the
host (``tools.environments.remote_common.resolve_passthrough_env``) before
every command: the values are exported at the start of the command, after the
session snapshot is sourced, so a stale snapshot value never wins; names the
active profile's scope lacks (profile multiplexing) are unset there.  The
backend's own credentials (its strip_env_keys) are never exported, whatever the
passthrough list says.  A host without the helper forwards nothing.
"""

from __future__ import annotations

import logging
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the mixin's super() is the host's BaseEnvironment, importable only once a host is set up
    from tools.environments.base import BaseEnvironment as _Environment
else:
    _Environment = object

logger = logging.getLogger("reference.common.passthrough")


def passthrough_prelude(blocked: frozenset[str]) -> str:
    """Shell lines that unset the scope's missing names and export the forwarded values ("" if none)."""
    try:
        from tools.environments.remote_common import prepend_unset, resolve_passthrough_env
    except ImportError:
        return ""
    try:
        values, unset = resolve_passthrough_env()
    except Exception as exc:  # e.g. UnscopedSecretError: no profile scope around this command
        logger.warning("passthrough variables not forwarded: %s", type(exc).__name__)
        return ""
    exports = [f"export {name}={shlex.quote(value)}" for name, value in sorted(values.items()) if name not in blocked]
    unset_names = set(unset) | (set(values) & blocked)
    return prepend_unset("\n".join(exports) + "\n" if exports else "", unset_names)


class PassthroughEnvironment(_Environment):
    """Mixin for a BaseEnvironment subclass: each command starts with the passthrough prelude.

    ``passthrough_blocked`` names the backend's credentials.  Current hosts also keep
    profile-scoped passthrough names out of the session snapshot when this is set.
    """

    _profile_scoped_passthrough = True
    passthrough_blocked: frozenset[str] = frozenset()

    def _wrap_command(self, command: str, cwd: str) -> str:
        prelude = passthrough_prelude(self.passthrough_blocked)
        return super()._wrap_command(prelude + command if prelude else command, cwd)

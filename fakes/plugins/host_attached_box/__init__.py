"""host_attached_box: tempdir_box declared host-attached, stripping inference providers' keys.

A fixture of the kit's own tests, loaded as a plugin directory.  Its commands
are processes on this machine beside every other process of it, as Hermes's
own local backend's are, and like that backend it names provider keys
(DEEPINFRA_API_KEY, OPENAI_API_KEY) in strip_env_keys.  Another program on the
machine that holds one of them is no leak of this backend's: the checks must
judge the backend's own processes only, and never print the other program's
value.
"""

from __future__ import annotations

from typing import Any

STRIPPED = frozenset({"TEMPDIR_BOX_TOKEN", "DEEPINFRA_API_KEY", "OPENAI_API_KEY"})


def _provider() -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class HostAttachedBoxProvider(TempdirBoxProvider):
        name = "host_attached_box"
        conformance_backend_kind = "host-attached"

        @property
        def strip_env_keys(self) -> frozenset[str]:
            return STRIPPED

    return HostAttachedBoxProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "host_attached_box")

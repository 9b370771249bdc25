"""A world view a plugin offers of its own sandboxes: ``provider.conformance_world``.

Without a fake the kit has no second channel into a backend's sandboxes, so
the clauses about what happens to them (deleted, kept, paused, replaced) are
unverified and a live run is certified ``black-box`` at best.  A plugin whose
vendor API can list and steer its own sandboxes may offer that channel: an
attribute (or a method taking no argument) ``conformance_world`` on the
provider, an object with

- ``sandboxes() -> dict[str, str]``: every sandbox of the plugin's account the
  kit's run may have made, id -> state in the kit's words (``running``,
  ``idle``, ``paused``, ``error``, ``creating``; a deleted one may be left out);
- ``read_file(sandbox_id, path) -> str | None``: a file's text in that sandbox
  (``path`` absolute, or ``~/...`` for its $HOME), None when it is not there;

and, for the clauses that disturb a sandbox behind the backend's back
(``world-states``), ``pause(sandbox_id)`` and ``delete(sandbox_id)``;
``fail(sandbox_id)`` (put it in the vendor's error state) and
``credentials(sandbox_id)`` (digests of the keys that reached it, as
fakes.keys.key_digest makes them) where the vendor can.  A check that needs an
operation the object lacks is unverified, naming it.  The kit uses the hook
only when the run has no fake: a fake's own world always speaks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.verdicts import UNVERIFIED_PREFIX

HOOK = "conformance_world"
REQUIRED = ("sandboxes", "read_file")
STATES = ("pause", "delete")


def from_provider(provider: Any) -> VendorWorld | None:
    """The provider's world view, or None when it offers none; a hook without the required calls is ignored."""
    try:
        hook = getattr(provider, HOOK, None)
        if callable(hook) and not all(callable(getattr(hook, n, None)) for n in REQUIRED):
            hook = hook()
    except Exception:
        return None
    if hook is None or not all(callable(getattr(hook, n, None)) for n in REQUIRED):
        return None
    return VendorWorld(hook)


class VendorWorld:
    """The kit's world interface over a plugin's ``conformance_world`` object."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        states = all(callable(getattr(hook, n, None)) for n in STATES)
        self.capabilities = frozenset({"world", "world-states"} if states else {"world"})

    def _call(self, name: str) -> Callable[..., Any]:
        fn = getattr(self.hook, name, None)
        if not callable(fn):  # the check that asked is unverified, as for any harness capability missing
            pytest.skip(
                f"{UNVERIFIED_PREFIX} (harness: the plugin's {HOOK} has no {name}(), so the kit cannot do that)"
            )
        return fn

    def sandboxes(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in dict(self.hook.sandboxes()).items()}

    def _read(self, sandbox_id: str, path: str) -> str | None:
        try:
            text = self.hook.read_file(sandbox_id, path)
        except Exception:
            return None
        return text if isinstance(text, str) else None

    def locate(self, relpath: str, content: str) -> str | None:
        for sandbox_id, state in self.sandboxes().items():
            if state != "deleted" and (self._read(sandbox_id, "~/" + relpath.lstrip("/")) or "").strip() == content:
                return sandbox_id
        return None

    def find_record(self, name: str, near: str | None = None) -> dict[str, str]:
        """A check's record file ``name`` in the directory ``near`` (where the check made it) of each sandbox."""
        if near is None:
            return {}
        found = {}
        for sandbox_id, state in self.sandboxes().items():
            text = self._read(sandbox_id, f"{near.rstrip('/')}/{name}") if state != "deleted" else None
            if text is not None:
                found[sandbox_id] = text
        return found

    def authenticated_with(self, sandbox_id: str, credential: str) -> bool:
        from fakes.keys import key_digest

        return key_digest(credential) in set(self._call("credentials")(sandbox_id))

    def pause(self, sandbox_id: str) -> Any:
        return self._call("pause")(sandbox_id)

    def delete(self, sandbox_id: str) -> Any:
        return self._call("delete")(sandbox_id)

    def fail(self, sandbox_id: str) -> Any:
        return self._call("fail")(sandbox_id)

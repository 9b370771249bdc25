"""Box lifecycle through the upstash-box SDK: find, create, resume, pause, delete.

Errors are sorted by what the caller should do: a Box that is gone, a Box in
the error state, a transient failure worth retrying (429/5xx/transport on
idempotent calls) and everything else.  Messages never carry the API key.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reference.common.credentials import ApiKeyAccount
from reference.common.errors import ConnectionErrors
from reference.common.redact import redact
from reference.common.retry import ATTEMPTS, RATE_LIMITED_ATTEMPTS, retry, status_code

if TYPE_CHECKING:  # the SDK is imported when a Box is first needed
    from upstash_box import Box

logger = logging.getLogger("reference.upstash_box")

USABLE = ("idle", "running", "ready", "creating")
RESUME_WAIT_S = 30.0
CREATE_TIMEOUT_MS = 120_000
HINT = "check UPSTASH_BOX_API_KEY, UPSTASH_BOX_BASE_URL and the Box console"


class BoxGone(RuntimeError):
    """The Box no longer exists."""


def is_transient(exc: BaseException) -> bool:
    code = status_code(exc)
    if code is None:  # transport errors carry no status
        return exc.__class__.__name__ == "BoxError"
    return code == 429 or code >= 500


def is_retryable_read(exc: BaseException) -> bool:
    """A transient failure of a call that is safe to repeat (a lookup, a status read, a delete by id)."""
    return is_transient(exc) and status_code(exc) != 404


connection_error = ConnectionErrors("upstash_box", HINT)


@dataclass
class Account(ApiKeyAccount):
    """Credentials and SDK access for one environment."""

    def options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"api_key": self.api_key, "timeout": CREATE_TIMEOUT_MS}
        if self.base_url:
            opts["base_url"] = self.base_url
        return opts

    def _sdk(self) -> Any:
        import upstash_box

        return upstash_box

    def find(self, name: str) -> Box[Any] | None:
        """The Box named ``name``, or None (a deleted Box counts as none)."""
        sdk = self._sdk()
        try:
            box: Box[Any] = retry(lambda: sdk.Box.get_by_name(name, **self.options()), retryable=is_retryable_read)
        except sdk.BoxError as exc:
            if status_code(exc) == 404:
                return None
            raise connection_error(f"looking up Box {name} failed", exc, secrets=self.secrets) from None
        if self.state(box) == "deleted":
            box.close()
            return None
        return box

    def create(
        self, name: str, *, labels: tuple[str, ...], size: str, runtime: str | None, keep_alive: bool
    ) -> tuple[Box[Any], bool]:
        """Create a Box[Any], or attach to the one another process just created under the
        same name; returns (box, attached)."""
        sdk = self._sdk()
        config: dict[str, Any] = {**self.options(), "name": name, "labels": list(labels), "size": size}
        if runtime:
            config["runtime"] = runtime
        if keep_alive:
            config["keep_alive"] = True
        try:
            # Only a 429 is retried: the request was refused, so no Box was made.  Any other
            # failure may have created one, and a retry could create a second.
            return retry(
                lambda: sdk.Box.create(**config),
                attempts=RATE_LIMITED_ATTEMPTS,
                retryable=lambda e: status_code(e) == 429,
            ), False
        except sdk.BoxError as exc:
            if status_code(exc) == 409:
                box = self.find(name)
                if box is not None:
                    logger.info("Box %s was created by another process; attaching to it", name)
                    return box, True
            hint = ""
            if status_code(exc) == 429:
                hint = (
                    f"; the Box API kept answering 429 (rate limit) for {RATE_LIMITED_ATTEMPTS} attempts: "
                    "wait a minute and run the command again"
                )
            elif status_code(exc) in (402, 403) or "limit" in str(exc).lower():
                hint = (
                    "; paused Boxes count toward the plan's limit: list them with "
                    "`box list --label hermes` and delete the ones you no longer need"
                )
            raise connection_error(f"creating Box {name} failed{hint}", exc, secrets=self.secrets) from None

    def state(self, box: Box[Any]) -> str:
        """The Box's status; "deleted" when the service no longer knows it."""
        sdk = self._sdk()
        try:
            data = retry(box.get_status, retryable=is_retryable_read)
        except sdk.BoxError as exc:
            if status_code(exc) == 404:
                return "deleted"
            raise connection_error(f"reading the status of Box {box.id} failed", exc, secrets=self.secrets) from None
        return str((data or {}).get("status") or "unknown").lower()

    def resume(self, box: Box[Any]) -> None:
        """Resume a paused Box and wait until it is usable again."""
        box.resume()
        deadline = time.monotonic() + RESUME_WAIT_S
        while time.monotonic() < deadline:
            state = self.state(box)
            if state in USABLE:
                return
            if state in ("error", "deleted"):
                raise BoxGone(f"Box {box.id} went to {state} while resuming")
            time.sleep(0.2)
        raise connection_error(f"Box {box.id} did not resume within {RESUME_WAIT_S:.0f}s")

    def pause(self, box: Box[Any]) -> None:
        sdk = self._sdk()
        try:
            box.pause()
        except sdk.BoxError as exc:
            if status_code(exc) != 404:  # already gone: nothing to pause
                logger.warning("pausing Box %s failed: %s", box.id, redact(exc, self.secrets))

    def delete(self, box: Box[Any], *, attempts: int = ATTEMPTS) -> bool:
        """Delete this Box by id; True when it is gone (a missing Box counts as deleted)."""
        sdk = self._sdk()
        try:
            retry(box.delete, attempts=attempts, retryable=is_retryable_read)
        except sdk.BoxError as exc:
            if status_code(exc) == 404:
                return True
            logger.warning(
                "deleting Box %s failed; it is kept so a later cleanup can retry: %s", box.id, redact(exc, self.secrets)
            )
            return False
        return True

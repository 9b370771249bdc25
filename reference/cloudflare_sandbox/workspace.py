"""One bridge workspace as this process sees it: its id and fixed config, the
HTTP client, what the Worker offers, and its lifecycle calls.

Init is idempotent and boots nothing; the first command starts (or restores)
the container.  What /health offers is a property of the Worker's deployment,
not of a workspace: it is asked once per Worker and credentials and kept for
FEATURES_TTL_S, so a new environment costs one call (init) before its first
command.  A Worker redeployed without an extension is noticed sooner: the
refused field makes the command ask /health again (``refresh_features``).
``finish`` releases the workspace on cleanup: a persistent one is snapshotted and
stopped, an ephemeral one destroyed and forgotten, and with ``delete``
(Hermes's force_remove) any workspace is discarded.
"""

from __future__ import annotations

import logging
import threading
import time

from reference.common.redact import redact
from reference.common.retry import RATE_LIMITED_ATTEMPTS, retry

from .client import BridgeClient, Features
from .errors import PREFIX, BridgeError, connection_error
from .gate import Gate, gate_for
from .settings import Settings

logger = logging.getLogger("reference.cloudflare_sandbox")
BUSY_BACKOFF_S = (0.05, 0.1, 0.2, 0.4, 0.8)
FEATURES_TTL_S = 300.0

# (endpoint, token, access headers) -> (what /health offered, when it was asked)
_features: dict[tuple[str, str, tuple[str, str] | None], tuple[Features, float]] = {}
_features_lock = threading.Lock()


def _features_key(settings: Settings) -> tuple[str, str, tuple[str, str] | None]:
    return (settings.endpoint, settings.token, settings.access)


def known_features(settings: Settings) -> Features | None:
    """What this Worker offered within the last FEATURES_TTL_S, if it was asked."""
    with _features_lock:
        cached = _features.get(_features_key(settings))
    if cached is None or time.monotonic() - cached[1] > FEATURES_TTL_S:
        return None
    return cached[0]


def remember_features(settings: Settings, features: Features) -> None:
    with _features_lock:
        _features[_features_key(settings)] = (features, time.monotonic())


def _passing(exc: BaseException) -> bool:
    """Rate limits, gateway errors and dropped connections pass; protocol answers do not."""
    return isinstance(exc, BridgeError) and (exc.status in (429, 502, 503, 504) or exc.code == "connection_error")


class Workspace:
    def __init__(self, settings: Settings, workspace_id: str, *, persistent: bool):
        self.settings = settings
        self.id = workspace_id
        self.persistent = persistent
        self.config = settings.workspace_config(persistent=persistent)
        self.client = BridgeClient(settings)
        self.gate: Gate = gate_for(settings.endpoint, workspace_id)
        self.features = Features()
        self._recreate_lock = threading.Lock()
        self.recreations = 0

    @property
    def secrets(self) -> tuple[str, ...]:
        return self.settings.secrets

    def open(self) -> None:
        """Negotiate extensions (unless this Worker's are known) and initialise the workspace;
        EnvironmentConnectionError on failure."""
        try:
            # Both calls are safe to repeat: /health reads, and init is keyed by the workspace id.
            # Rate limits among the failures: as many attempts as a refused request gets.
            known = known_features(self.settings)
            if known is None:
                known = retry(self.client.health, attempts=RATE_LIMITED_ATTEMPTS, retryable=_passing)
                remember_features(self.settings, known)
            self.features = known
            retry(lambda: self.client.init(self.id, self.config), attempts=RATE_LIMITED_ATTEMPTS, retryable=_passing)
        except BridgeError as exc:
            self.client.close()
            raise connection_error(f"cannot open workspace {self.id}: {exc.describe()}", secrets=self.secrets) from None
        logger.info(
            "workspace %s ready (%s; extensions: %s)",
            self.id,
            "persistent" if self.persistent else "ephemeral",
            ", ".join(self.features.names) or "none",
        )

    def refresh_features(self) -> None:
        """The Worker refused an extension field: it was redeployed without it; ask again."""
        try:
            self.features = self.client.health()
        except BridgeError:
            self.features = Features()  # plain v1 for this workspace; the next one asks again
            return
        remember_features(self.settings, self.features)

    def recreate(self, generation: int) -> bool:
        """Initialise the workspace again after workspace_missing; once per loss, however many
        commands met it.  True when this call created it (the caller marks the recreation)."""
        with self._recreate_lock:
            if self.recreations != generation:
                return False
            self.client.init(self.id, self.config)
            self.recreations += 1
            logger.warning(
                "%s: workspace %s no longer existed on the Worker (deleted outside Hermes); "
                "created it again with fresh files",
                PREFIX,
                self.id,
            )
            return True

    def cancel(self, request_id: str) -> None:
        """Best effort: the cancel is idempotent and may arrive before the exec itself."""
        try:
            self.client.cancel(self.id, request_id)
        except BridgeError as exc:
            logger.info("cancel of %s in %s failed: %s", request_id, self.id, exc.describe())

    def finish(self, *, delete: bool, deadline: float) -> None:
        """Release (or delete) on cleanup, waiting out commands that are ending; never raises."""
        if not self.gate.enter(shared=False, limit=1, deadline=deadline, stop=lambda: False):
            logger.warning("%s: commands in workspace %s did not end in time; releasing it anyway", PREFIX, self.id)
            entered = False
        else:
            entered = True
        try:
            self._release(delete=delete, deadline=deadline)
        finally:
            if entered:
                self.gate.leave(shared=False)

    def _release(self, *, delete: bool, deadline: float) -> None:
        what = "delete" if delete else "release"
        for pause in (*BUSY_BACKOFF_S, *[1.0] * 30):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                if delete:
                    self.client.delete(self.id, timeout=remaining)
                else:
                    self.client.release(self.id, timeout=remaining)
                return
            except BridgeError as exc:
                if exc.code == "workspace_busy":  # a cancelled command is still stopping
                    time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                    continue
                self._report(what, exc)
                return
        logger.warning(
            "%s: could not %s workspace %s before the cleanup deadline; the Worker's idle alarm will %s it",
            PREFIX,
            what,
            self.id,
            "snapshot" if self.persistent else "remove",
        )

    def _report(self, what: str, exc: BridgeError) -> None:
        if exc.code == "workspace_lost":
            message = "its container was lost before any snapshot existed (workspace_lost)"
        elif exc.code == "snapshot_failed":
            message = "the snapshot failed; the Worker keeps the container running and retries"
        else:
            message = exc.describe()
        logger.warning("%s: %s of workspace %s failed: %s", PREFIX, what, self.id, redact(message, self.secrets))

    def close(self) -> None:
        self.client.close()

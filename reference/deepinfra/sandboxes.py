"""Sandbox lifecycle through the deepinfra SDK: create, reattach, resume, stop, terminate.

Identity is tags, not names.  Every sandbox gets ``hermes_task_id`` (the task),
``hermes_session`` (this Hermes process: sandboxes never outlive the session
that made them) and a fresh ``hermes_creation_id`` per create.  The task tag is
no ownership token (many tasks collapse to "default"), so:

- a failed create is cleaned up by its creation id only, never by task;
- a new environment reattaches a stopped sandbox only when exactly one
  sandbox of this session carries its task tag; otherwise it creates fresh.
  A task this process never created a sandbox for has none of this session
  to find, so that lookup is skipped (``created_here``).

Every sandbox this process creates or reattaches is terminated when the
process exits (the end of the Hermes session), whether or not an
environment still holds it.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from reference.common.credentials import ApiKeyAccount
from reference.common.errors import ConnectionErrors
from reference.common.redact import redact
from reference.common.retry import ATTEMPTS, RATE_LIMITED_ATTEMPTS, pause_s, retry, status_code
from reference.deepinfra.settings import KEY_VAR, MAX_ACTIVE, PLAN_VAR

logger = logging.getLogger("reference.deepinfra")

SESSION_ID = uuid.uuid4().hex  # this Hermes process
TASK_TAG, SESSION_TAG, CREATION_TAG = "hermes_task_id", "hermes_session", "hermes_creation_id"
HTTP_TIMEOUT_S = 30.0
BOOT_WAIT_S = 50.0  # create and start: Hermes holds a per-task lock meanwhile
STOP_WAIT_S = 30.0
EXIT_BUDGET_S = 10.0  # terminating leftovers at process exit
HINT = f"check {KEY_VAR}, {PLAN_VAR} and the sandboxes in the DeepInfra dashboard"


class SandboxGone(RuntimeError):
    """The sandbox no longer exists (terminated outside this environment)."""


class SandboxBroken(RuntimeError):
    """The sandbox is in the failed state."""


class CommandRefused(RuntimeError):
    """A command must not run: its message says why, for the command's output."""


def refused_by_state(exc: BaseException, *, exec_call: bool) -> bool:
    """Did the service refuse a call because of the sandbox's state (gone, or not running), before doing
    anything?  An exec route answers 404 and 409 for that alone; the file API also answers them for a
    path (a missing file, a directory in the way), told apart by what it says."""
    import deepinfra

    if not isinstance(exc, (deepinfra.NotFoundError, deepinfra.ConflictError)):
        return False
    if exec_call:
        return True
    said = str(getattr(exc, "message", "") or exc).lower()
    return "not running" in said if isinstance(exc, deepinfra.ConflictError) else "sandbox not found" in said


def is_cap(exc: BaseException) -> bool:
    """A 429 about the account's active-sandbox cap (waiting will not help), not about request rate."""
    said = str(getattr(exc, "message", "") or exc).lower()
    return "active sandbox" in said or "maximum" in said


def is_transient(exc: BaseException) -> bool:
    """Worth another try on an idempotent call: transport errors, 429-free 5xx."""
    import deepinfra

    if isinstance(exc, deepinfra.APIConnectionError):
        return True
    code = status_code(exc)
    return code is not None and code >= 500


connection_error = ConnectionErrors("deepinfra", HINT)


# One SDK client per key and endpoint for the whole process: building one costs a TLS context
# (the CA bundle parsed again) and fresh connections, and every environment of a session talks to
# the same endpoint with the same key.  The SDK's httpx client is thread-safe.  Bounded: a client
# no longer cached is dropped, not closed (an environment may still hold it), and closes once unused.
_CLIENTS_MAX = 8
_clients: dict[tuple[str, str | None], Any] = {}
_clients_lock = threading.Lock()


def shared_client(api_key: str, base_url: str | None) -> Any:
    """The process's DeepInfraClient for this key and endpoint (None: the service's own; always given to
    the SDK, which would otherwise read DEEPINFRA_BASE_URL, the endpoint of Hermes's inference provider)."""
    from deepinfra import DeepInfraClient
    from deepinfra.clients.deepinfra import DEFAULT_BASE_URL

    base_url = base_url or DEFAULT_BASE_URL

    with _clients_lock:
        client = _clients.get((api_key, base_url))
        if client is None:
            while len(_clients) >= _CLIENTS_MAX:
                _clients.pop(next(iter(_clients)))
            client = _clients[(api_key, base_url)] = DeepInfraClient(
                api_key=api_key, base_url=base_url, timeout=HTTP_TIMEOUT_S
            )
        return client


@dataclass
class Account(ApiKeyAccount):
    """The key, the endpoint and the SDK client for an environment (shared by every environment with
    the same key and endpoint)."""

    _client: Any = field(default=None, repr=False)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = shared_client(self.api_key, self.base_url)
        return self._client

    def explain(self, message: str, exc: BaseException | None = None) -> Exception:
        return connection_error(message, exc, secrets=self.secrets)

    # -- find or make --------------------------------------------------------------------
    def create(self, task_id: str, plan: str) -> Any:
        """A new running sandbox; a create that fails leaves nothing behind."""
        import deepinfra

        attempt = rate_limited = 0
        while True:
            attempt += 1
            creation_id = uuid.uuid4().hex
            tags = {TASK_TAG: task_id, SESSION_TAG: SESSION_ID, CREATION_TAG: creation_id}
            try:
                sandbox = deepinfra.Sandbox.create(
                    plan=plan, tags=tags, wait=True, wait_timeout=BOOT_WAIT_S, client=self.client
                )
            except deepinfra.SandboxWaitError as exc:
                self.terminate_id(exc.sandbox_id)  # booted into failed, or too slow: not ours to keep
                raise self.explain("the new DeepInfra sandbox did not start", exc) from None
            except deepinfra.RateLimitError as exc:
                if is_cap(exc):
                    raise self.explain(self.cap_message(exc)) from None
                # A request rate limit: refused, so nothing was made; wait and ask again.
                rate_limited += 1
                if rate_limited >= RATE_LIMITED_ATTEMPTS:
                    raise self.explain(
                        f"DeepInfra kept answering 429 (rate limit) for {rate_limited} attempts; "
                        "wait a minute and run the command again",
                        exc,
                    ) from None
                time.sleep(pause_s(rate_limited))
                continue
            except deepinfra.BadRequestError as exc:
                raise self.explain(self.plan_message(plan, exc)) from None
            except (deepinfra.APIStatusError, deepinfra.APIConnectionError) as exc:
                if is_transient(exc):
                    # The create may have happened with its reply lost: find it by its own tag.
                    self.cleanup_creation(creation_id)
                    if attempt - rate_limited == 1:
                        logger.info(
                            "creating a DeepInfra sandbox failed (%s); cleaned up, trying once more",
                            redact(exc, self.secrets),
                        )
                        continue
                raise self.explain("creating a DeepInfra sandbox failed", exc) from None
            own(self, sandbox.id)
            with _owned_lock:
                _tasks_created.add((SESSION_ID, task_id))
            logger.info("created DeepInfra sandbox %s for task %s", sandbox.id, task_id)
            return sandbox

    def cleanup_creation(self, creation_id: str) -> None:
        import deepinfra

        try:
            leaked = retry(
                lambda: deepinfra.Sandbox.list(tags={CREATION_TAG: creation_id}, client=self.client),
                attempts=ATTEMPTS,
                retryable=is_transient,
            )
        except Exception as exc:
            logger.warning("could not look for a sandbox left by a failed create: %s", redact(exc, self.secrets))
            return
        for sandbox in leaked:
            if sandbox.state != "deleted":
                logger.info("terminating sandbox %s left by a failed create", sandbox.id)
                self.terminate_id(sandbox.id)

    def reattach(self, task_id: str) -> Any | None:
        """This session's stopped sandbox for ``task_id``, started again, if exactly one such sandbox exists."""
        import deepinfra

        if not created_here(task_id):
            return None  # only this process makes sandboxes with this session's tag: none exists for the task
        try:
            found = retry(
                lambda: deepinfra.Sandbox.list(tags={TASK_TAG: task_id, SESSION_TAG: SESSION_ID}, client=self.client),
                attempts=ATTEMPTS,
                retryable=is_transient,
            )
        except Exception as exc:
            logger.warning(
                "looking for task %s's sandbox failed (%s); creating a new one", task_id, redact(exc, self.secrets)
            )
            return None
        matches = [sb for sb in found if sb.state not in ("deleted", "failed")]
        if len(matches) != 1:
            if len(matches) > 1:
                logger.warning(
                    "%d sandboxes carry task %s's tag; not guessing which to resume, creating a new one",
                    len(matches),
                    task_id,
                )
            return None
        sandbox = matches[0]
        if sandbox.state not in ("stopped", "stopping"):
            return None  # running: another environment is using it right now
        try:
            self.ensure_running(sandbox)
        except Exception as exc:
            logger.warning("resuming sandbox %s failed (%s); creating a new one", sandbox.id, redact(exc, self.secrets))
            return None
        own(self, sandbox.id)
        logger.info("resumed DeepInfra sandbox %s for task %s", sandbox.id, task_id)
        return sandbox

    # -- state -----------------------------------------------------------------------------
    def state(self, sandbox: Any) -> str:
        """The sandbox's state; "deleted" when the service no longer knows it."""
        import deepinfra

        try:
            sandbox.refresh()  # a GET: the SDK retries transport errors and 502-504 itself
        except deepinfra.NotFoundError:
            return "deleted"
        except (deepinfra.APIStatusError, deepinfra.APIConnectionError) as exc:
            raise self.explain(f"reading the state of sandbox {sandbox.id} failed", exc) from None
        return str(sandbox.state or "unknown")

    def ensure_running(self, sandbox: Any) -> bool:
        """Make the sandbox usable; True when it had to be started (resumed)."""
        import deepinfra

        for _ in range(3):
            state = self.state(sandbox)
            try:
                if state == "running":
                    return False
                if state in ("creating", "starting"):
                    sandbox.wait_until_running(timeout=BOOT_WAIT_S)
                    return False
                if state == "stopping":
                    sandbox.wait_until_stopped(timeout=STOP_WAIT_S)
                    continue
                if state == "stopped":
                    logger.info("resuming stopped sandbox %s", sandbox.id)
                    sandbox.start(wait_timeout=BOOT_WAIT_S)
                    return True
            except deepinfra.ConflictError:
                continue  # it moved on meanwhile: look again
            except deepinfra.SandboxFailedError:
                continue
            except deepinfra.SandboxTimeoutError as exc:
                raise self.explain(f"sandbox {sandbox.id} did not become ready", exc) from None
            except deepinfra.NotFoundError:
                state = "deleted"
            except (deepinfra.APIStatusError, deepinfra.APIConnectionError) as exc:
                raise self.explain(f"resuming sandbox {sandbox.id} failed", exc) from None
            if state == "deleted":
                raise SandboxGone(sandbox.id)
            if state == "failed":
                raise SandboxBroken(sandbox.id)
            raise self.explain(f"sandbox {sandbox.id} is in the unexpected state {state!r}")
        raise self.explain(f"sandbox {sandbox.id} kept changing state; try again")

    # -- release ------------------------------------------------------------------------------
    def stop(self, sandbox: Any) -> bool:
        """Stop (keep /workspace, release compute); True when it is stopped or gone."""
        import deepinfra

        try:
            sandbox.stop(wait_timeout=STOP_WAIT_S)
        except deepinfra.NotFoundError:
            disown(sandbox.id)
            return True
        except deepinfra.ConflictError:
            return self.state(sandbox) in ("stopped", "stopping", "deleted", "failed")
        except Exception as exc:
            logger.warning("stopping sandbox %s failed: %s", sandbox.id, redact(exc, self.secrets))
            return False
        return True

    def terminate_id(self, sandbox_id: str | None, *, attempts: int = ATTEMPTS, quiet: bool = False) -> bool:
        """Terminate by id; True when it is gone (already gone counts)."""
        import deepinfra

        if not sandbox_id:
            return True
        from urllib.parse import quote

        spec = deepinfra.RequestSpec("DELETE", f"/v1/sandboxes/{quote(sandbox_id, safe='')}")
        try:
            retry(lambda: self.client.request(spec), attempts=attempts, retryable=is_transient)
        except deepinfra.NotFoundError:
            pass
        except Exception as exc:
            logger.log(
                logging.DEBUG if quiet else logging.WARNING,
                "terminating sandbox %s failed; it is kept so a later cleanup can retry: %s",
                sandbox_id,
                redact(exc, self.secrets),
            )
            return False
        disown(sandbox_id)
        return True

    # -- messages -------------------------------------------------------------------------------
    def cap_message(self, exc: BaseException) -> str:
        """Why no sandbox could be created, and what to do about it."""
        import deepinfra

        try:
            active = [sb for sb in deepinfra.Sandbox.list(client=self.client) if sb.state not in ("deleted", "failed")]
            listing = "; ".join(
                f"{sb.id} {sb.state}" + (f" (task {sb.tags[TASK_TAG]})" if TASK_TAG in sb.tags else "") for sb in active
            )
            seen = f" Active now: {listing}." if active else ""
        except Exception:
            seen = ""
        said = redact(getattr(exc, "message", exc), self.secrets)
        return (
            f"DeepInfra refused a new sandbox: the account's cap on active sandboxes is reached ({said}; "
            f"DeepInfra allows {MAX_ACTIVE} per account, stopped sandboxes count too).{seen} Terminate "
            "sandboxes you no longer need (DeepInfra dashboard, or "
            "deepinfra.Sandbox.from_id('<id>').terminate()) or end another Hermes session, then run the "
            "command again."
        )

    def plan_message(self, plan: str, exc: BaseException) -> str:
        import deepinfra

        try:
            known = ", ".join(p.id for p in deepinfra.Sandbox.catalog(client=self.client))
        except Exception:
            known = "see the DeepInfra sandbox catalog"
        reason = redact(getattr(exc, "message", exc), self.secrets)
        if plan:
            return (
                f"DeepInfra refused {PLAN_VAR}={plan!r}: {reason}. Available plans: {known}. "
                f"Unset {PLAN_VAR} to use the default plan."
            )
        return f"DeepInfra refused to create a sandbox: {reason}"


# -- sandboxes this process owns: terminated when the session ends -------------------------------
_owned: dict[str, Account] = {}
_owned_lock = threading.Lock()
_tasks_created: set[tuple[str, str]] = set()  # (session id, task id) this process created a sandbox for


def created_here(task_id: str) -> bool:
    """Whether this process created a sandbox for ``task_id`` under the current session id."""
    with _owned_lock:
        return (SESSION_ID, task_id) in _tasks_created


def own(account: Account, sandbox_id: str) -> None:
    with _owned_lock:
        _owned[sandbox_id] = account


def disown(sandbox_id: str) -> None:
    with _owned_lock:
        _owned.pop(sandbox_id, None)


def owned() -> list[str]:
    with _owned_lock:
        return list(_owned)


def terminate_owned(budget_s: float = EXIT_BUDGET_S) -> None:
    """End of the session: terminate every sandbox this process still owns, within ``budget_s``."""
    with _owned_lock:
        pending = list(_owned.items())
    workers = [
        threading.Thread(
            target=account.terminate_id,
            args=(sandbox_id,),
            kwargs={"attempts": 1, "quiet": True},
            daemon=True,
            name=f"deepinfra-exit-{sandbox_id}",
        )
        for sandbox_id, account in pending
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + budget_s
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))


atexit.register(terminate_owned)

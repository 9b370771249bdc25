"""``hermes-backend-kit doctor``: a health check of a backend that takes seconds.

One row per step, each bounded in time, with ok/FAIL and what to do:
the plugin loads; is_available, probe and doctor_checks behave; an
environment is created; one command round-trips; commands run where they
should (remote backends: not on this machine); cleanup leaves the sandbox
deleted, or kept when persistent.  A failing row's fix comes from that
row's own failure (what the backend returned, raised or left behind), never
from one text per step.  No row ever shows a credential (every row goes
through conformance.redact).  Everything doctor makes lives in one temp
directory (``kit-doctor-*``), removed when it ends, with any process still
running under it.

A backend that cannot be loaded at all (bad --backend, plugin.yaml or
--backend-config) is not a row: it is a conformance.errors.KitError, which
the command line prints as one ``error:`` line (exit 2).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import leftovers, readiness, redact
from conformance.host.calls import CallHung, bounded
from conformance.host.netguard import network_guard


@dataclass
class Row:
    ok: bool
    step: str
    detail: str
    fix: str = ""


class StepFailed(Exception):
    """A step's own finding: what the backend did and the fix for exactly that."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.what = what
        self.fix = fix


def shown(value: Any) -> str:
    """A value the backend returned, for a row: never a bare ``None``."""
    if value is None:
        return "no value"
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


# Words in a backend's error and the fix each points at (first match wins).
_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\b(401|403)\b|unauthori[sz]ed|forbidden|invalid (api )?key|credential|token", re.I),
        "check the backend's credentials: the service refused them",
    ),
    (
        re.compile(r"\b429\b|rate.?limit|quota|limit reached|too many", re.I),
        "the account is at a limit: delete unused sandboxes or raise the account's quota",
    ),
    (
        re.compile(
            r"connection refused|name or service not known|nodename nor servname|getaddrinfo|"
            r"timed? ?out|unreachable|connecterror",
            re.I,
        ),
        "check the endpoint: the service did not answer at the configured URL",
    ),
    (
        re.compile(r"cannot import name", re.I),
        "a module has no such name: a Hermes name the running host lacks (run on the Hermes release the backend "
        "needs) or a misspelt import",
    ),
    (re.compile(r"no module named|importerror|modulenotfounderror", re.I), "install the backend's SDK (its pip extra)"),
)


def cause_fix(exc: BaseException, call: str) -> str:
    """The fix a backend's exception from ``call`` points at."""
    if isinstance(exc, CallHung):
        return f"make {call} return within its deadline: see what it waits for (network, a lock, a process)"
    text = f"{type(exc).__name__}: {exc}"
    for pattern, fix in _CAUSES:
        if pattern.search(text):
            return fix
    return f"fix {call}: it raised {type(exc).__name__} (rerun with --debug for the traceback)"


class Doctor:
    def __init__(self, run: Any, *, persistent: bool = False, debug: bool = False):
        self.run = run
        self.persistent = persistent
        self.debug = debug
        self.rows: list[Row] = []
        self.tracebacks: list[str] = []

    def _row(self, ok: bool, step: str, detail: str, fix: str = "") -> bool:
        self.rows.append(Row(ok, step, redact.redact(detail), redact.redact(fix)))
        return ok

    def _step(self, step: str, call: str, fn: Callable[[], str], deadline: float) -> bool:
        """Run one step: ok with its detail, or FAIL with the step's own finding and fix."""
        started = time.monotonic()
        try:
            detail = bounded(fn, deadline=deadline, what=call)
        except StepFailed as failed:
            return self._row(False, step, failed.what, failed.fix)
        except Exception as exc:
            if self.debug and not isinstance(exc, CallHung):
                self.tracebacks.append(redact.redact("".join(traceback.format_exception(exc))))
            return self._row(False, step, " ".join(f"{type(exc).__name__}: {exc}".split()), cause_fix(exc, call))
        return self._row(True, step, f"{detail} ({time.monotonic() - started:.2f}s)")

    def check(self) -> list[Row]:
        run = self.run
        p = run.provider
        version = f" {run.plugin.version}" if run.plugin.version else ""
        self._row(
            True, "plugin loads", f"{run.plugin.plugin_name or run.plugin.spec}{version} registers provider {p.name!r}"
        )
        if not self._step("is_available", "is_available()", self._available, 2.0):
            return self.rows
        self._step("probe", "probe()", self._probe, 2.0)
        self._step("doctor_checks", "doctor_checks()", self._doctor_checks, 10.0)
        env: list[Any] = []

        def create() -> str:
            env.append(run.create(run.new_task_id("doctor"), persistent=self.persistent, track=False))
            cwd = getattr(env[0], "cwd", None)
            return f"{type(env[0]).__name__} in {cwd or 'its default directory'}"

        if not self._step("create environment", "create_environment()", create, 60.0):
            return self.rows
        e = env[0]
        nonce = f"kit-doctor-{os.urandom(6).hex()}"
        self._step("round trip", "execute()", lambda: self._round_trip(e, nonce), 40.0)
        self._step("identity", "execute()", lambda: self._identity(e, nonce), 40.0)
        self._step("cleanup", "cleanup()", lambda: self._cleanup(e, nonce), 60.0)
        return self.rows

    # -- the steps -------------------------------------------------------------------------
    def _available(self) -> str:
        p = self.run.provider
        with network_guard() as attempts:
            value = p.is_available()
        if attempts:
            raise StepFailed(
                f"is_available() opened {len(attempts)} network connection(s) ({attempts[0]})",
                "make is_available() check only local configuration (credentials set, SDK "
                "importable): Hermes calls it offline and often",
            )
        if value is True:
            return "True, offline"
        if not isinstance(value, bool):
            raise StepFailed(
                f"is_available() returned {shown(value)}, not a bool", "return True or False from is_available()"
            )
        declared, required = readiness.declared_requirements(getattr(self.run.plugin, "manifest", None))
        unset = [name for name in required if not os.environ.get(name)]
        if unset:
            raise StepFailed("is_available() returned False", f"set {', '.join(unset)} (plugin.yaml requires_env)")
        if required:
            why = "with every variable plugin.yaml requires set"
        elif declared == "no plugin.yaml":
            why = "(the backend has no plugin.yaml, so it declares no variables it requires)"
        else:
            why = "(its plugin.yaml declares no requires_env)"
        named = self._named_by_probe()
        raise StepFailed(
            f"is_available() returned False {why}",
            f"set {', '.join(named)}, which its probe() names"
            if named
            else "see the backend's setup instructions: its SDK extra may be missing or a setting it reads is not set",
        )

    def _named_by_probe(self) -> list[str]:
        """Unset variables the backend's probe() detail names (what it would need)."""
        try:
            answer = self.run.provider.probe()
        except Exception:
            return []
        detail = answer[1] if isinstance(answer, tuple) and len(answer) == 2 else ""
        return readiness.named_variables(str(detail or ""))

    def _probe(self) -> str:
        answer = self.run.provider.probe()
        if not (isinstance(answer, tuple) and len(answer) == 2):
            raise StepFailed(f"probe() returned {shown(answer)}", "return a (status, detail) pair from probe()")
        status, detail = answer
        if status != "ready":
            said = f": {detail}" if detail else ""
            raise StepFailed(
                f"probe() says {shown(status)}{said}",
                f"fix what the probe reports{said}"
                if detail
                else "have probe() say what is wrong in its detail, then fix that",
            )
        return f"ready: {detail}" if detail else "ready"

    def _doctor_checks(self) -> str:
        rows = self.run.provider.doctor_checks()
        if not isinstance(rows, list | tuple) or not all(isinstance(r, list | tuple) and len(r) == 3 for r in rows):
            raise StepFailed(
                f"doctor_checks() returned {shown(rows)}",
                "return a list of (ok, name, detail) tuples from doctor_checks()",
            )
        bad = [(str(name), str(detail)) for ok, name, detail in rows if not ok]
        if bad:
            names = ", ".join(name for name, _ in bad)
            raise StepFailed(
                "; ".join(f"{name}: {detail}" for name, detail in bad),
                f"fix what the backend's own check(s) {names} report",
            )
        return f"{len(rows)} row(s) ok"

    @staticmethod
    def _round_trip(env: Any, nonce: str) -> str:
        result = env.execute(f"echo {nonce}", timeout=30)
        if not isinstance(result, dict):
            raise StepFailed(
                f"execute() returned {shown(result)}", "return a dict with 'output' and 'returncode' from execute()"
            )
        code, output = result.get("returncode"), result.get("output")
        if "returncode" not in result:
            raise StepFailed(
                f"execute() returned no 'returncode' (keys: {', '.join(map(str, result))})",
                "put the command's exit status under 'returncode'",
            )
        if code != 0:
            raise StepFailed(
                f"`echo` returned {shown(code)}, output {shown(output)}",
                "run the command with bash in the sandbox and return its exit status (0 here)",
            )
        if not isinstance(output, str) or nonce not in output:
            raise StepFailed(
                f"`echo {nonce}` came back as {shown(output)}", "return the command's stdout and stderr under 'output'"
            )
        return "echo came back"

    def _identity(self, env: Any, nonce: str) -> str:
        if not getattr(self.run.provider, "is_remote", False):
            return "local backend: not checked"
        path = Path(tempfile.gettempdir()) / nonce
        env.execute(f"echo {nonce} > {path}", timeout=30)
        if path.exists():
            path.unlink()
            raise StepFailed(
                f"a file written through the backend appeared on this machine ({path})",
                "run commands in the remote sandbox: the backend must never fall back to local execution",
            )
        env.execute(f"rm -f {path}", timeout=30)
        return "commands do not run on this machine"

    def _cleanup(self, env: Any, nonce: str) -> str:
        run = self.run
        world = run.world
        sandbox = world.locate(f".kit-{nonce}", nonce) if world is not None and self._plant(env, nonce) else None
        run.cleanup(env)
        if world is None or sandbox is None:
            return "cleanup returned (no way to inspect the sandbox)"
        state = world.sandboxes().get(sandbox, "deleted")
        if not self.persistent and state != "deleted":
            raise StepFailed(
                f"sandbox {sandbox} is still {state} after cleanup()",
                "delete the per-session sandbox in cleanup() (only a persistent one is kept)",
            )
        if self.persistent and state == "deleted":
            raise StepFailed(
                f"persistent sandbox {sandbox} was deleted by cleanup()",
                "keep a persistent sandbox in cleanup(): stop or pause it instead of deleting it",
            )
        return f"sandbox {sandbox} is {state}"

    @staticmethod
    def _plant(env: Any, nonce: str) -> bool:
        result = env.execute(f'printf %s {nonce} > "$HOME"/.kit-{nonce}', timeout=30)
        return isinstance(result, dict) and result.get("returncode") == 0


def main(
    backend: str,
    *,
    backend_config: str | None,
    fake: str | None,
    live: bool,
    host: str,
    persistent: bool,
    debug: bool = False,
) -> int:
    """Print the rows; 0 when every step is ok, 1 otherwise.  A backend that cannot load raises a KitError."""
    from conformance.run import KitRun, RunOptions

    started = time.monotonic()
    redact.register_environ()
    workdir = Path(tempfile.mkdtemp(prefix="kit-doctor-"))
    try:
        run = KitRun.start(
            RunOptions(
                backend=backend,
                backend_config=backend_config,
                host=host,
                fake=fake,
                live=live,
                ask_ready=False,  # its availability step asks, and says what is missing
            ),
            workdir,
        )
        try:
            doctor = Doctor(run, persistent=persistent, debug=debug)
            rows = doctor.check()
        finally:
            run.close()
    finally:
        leftovers.end_processes_under(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    for text in doctor.tracebacks:
        print(text, end="")
    for row in rows:
        print(f"{'ok  ' if row.ok else 'FAIL'}  {row.step:<20} {row.detail}")
        if not row.ok and row.fix:
            print(f"      fix: {row.fix}")
    fake_name = getattr(run.fake, "name", None)
    where = "live service" if live else f"{fake_name} fake" if fake_name else "backend, with no fake service"
    print(f"{sum(r.ok for r in rows)}/{len(rows)} steps ok against the {where} in {time.monotonic() - started:.1f}s")
    return 0 if all(r.ok for r in rows) else 1

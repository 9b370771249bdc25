"""``hermes-backend-kit doctor``: a health check of a backend that takes seconds.

One row per step, each bounded in time, with ok/FAIL and what to do:
the plugin loads; is_available, probe and doctor_checks behave; an
environment is created; one command round-trips; commands run where they
should (remote backends: not on this machine); cleanup leaves the sandbox
deleted, or kept when persistent.  No row ever shows a credential (every
row goes through conformance.redact).  Everything doctor makes lives in one
temp directory (``kit-doctor-*``), removed when it ends, with any process
still running under it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import leftovers, redact
from conformance.host.calls import bounded
from conformance.host.netguard import network_guard


@dataclass
class Row:
    ok: bool
    step: str
    detail: str
    fix: str = ""


class Doctor:
    def __init__(self, run: Any, *, persistent: bool = False):
        self.run = run
        self.persistent = persistent
        self.rows: list[Row] = []

    def _row(self, ok: bool, step: str, detail: str, fix: str = "") -> bool:
        self.rows.append(Row(ok, step, redact.redact(detail), redact.redact(fix)))
        return ok

    def _step(self, step: str, fn: Callable[[], str], fix: str, deadline: float) -> Any:
        started = time.monotonic()
        try:
            detail = bounded(fn, deadline=deadline, what=step)
        except Exception as exc:
            self._row(False, step, f"{type(exc).__name__}: {exc}", fix)
            return False
        return self._row(True, step, f"{detail} ({time.monotonic() - started:.2f}s)")

    def check(self) -> list[Row]:
        run = self.run
        p = run.provider
        self._row(True, "plugin loads", f"{run.plugin.plugin_name or run.plugin.spec} {run.plugin.version or ''} "
                                        f"registers provider {p.name!r}".replace("  ", " "))

        def available() -> str:
            with network_guard() as attempts:
                value = p.is_available()
            if attempts:
                raise RuntimeError(f"is_available() opened network connections ({len(attempts)})")
            if value is not True:
                raise RuntimeError(f"is_available() returned {value!r}")
            return "True, offline"

        if not self._step("is_available", available, "set the backend's credentials (see its setup "
                          "instructions) and install its SDK extra", 2.0):
            return self.rows

        def probe() -> str:
            status, detail = p.probe()
            if status != "ready":
                raise RuntimeError(f"probe() says {status}: {detail}")
            return f"ready: {detail}" if detail else "ready"

        self._step("probe", probe, "fix what the probe reports; it must answer within 2 s", 2.0)

        def doctor_rows() -> str:
            rows = p.doctor_checks()
            bad = [f"{name} {detail}" for ok, name, detail in rows if not ok]
            if bad:
                raise RuntimeError("; ".join(bad))
            return f"{len(rows)} row(s) ok"

        self._step("doctor_checks", doctor_rows, "fix the failing rows", 10.0)

        env: list[Any] = []

        def create() -> str:
            env.append(run.create(run.new_task_id("doctor"), persistent=self.persistent, track=False))
            return f"{type(env[0]).__name__} in {env[0].cwd}"

        if not self._step("create environment", create, "check the endpoint, the credentials and the "
                          "account's limits", 60.0):
            return self.rows
        e = env[0]
        nonce = f"kit-doctor-{os.urandom(6).hex()}"

        def round_trip() -> str:
            result = e.execute(f"echo {nonce}", timeout=30)
            if result.get("returncode") != 0 or nonce not in result.get("output", ""):
                raise RuntimeError(f"returncode {result.get('returncode')!r}, output {result.get('output', '')[:200]!r}")
            return "echo came back"

        self._step("round trip", round_trip, "see the backend's logs; a command must run and return its output", 40.0)

        def identity() -> str:
            if not getattr(p, "is_remote", False):
                return "local backend: not checked"
            path = Path(tempfile.gettempdir()) / nonce
            e.execute(f"echo {nonce} > {path}", timeout=30)
            if path.exists():
                path.unlink()
                raise RuntimeError("a file written through the backend appeared on this machine: commands run locally")
            e.execute(f"rm -f {path}", timeout=30)
            return "commands do not run on this machine"

        self._step("identity", identity, "the backend must not fall back to local execution", 40.0)

        def cleanup() -> str:
            world = run.world
            sandbox = world.locate(f".kit-{nonce}", nonce) if world is not None and self._plant(e, nonce) else None
            run.cleanup(e)
            if world is None or sandbox is None:
                return "cleanup returned (no way to inspect the sandbox)"
            state = world.sandboxes().get(sandbox, "deleted")
            want_gone = not self.persistent
            if want_gone and state != "deleted":
                raise RuntimeError(f"sandbox {sandbox} is still {state} after cleanup")
            if not want_gone and state == "deleted":
                raise RuntimeError(f"persistent sandbox {sandbox} was deleted by cleanup")
            return f"sandbox {sandbox} is {state}"

        self._step("cleanup", cleanup, "cleanup must delete a per-session sandbox and keep a persistent one", 60.0)
        return self.rows

    @staticmethod
    def _plant(env: Any, nonce: str) -> bool:
        result = env.execute(f"printf %s {nonce} > \"$HOME\"/.kit-{nonce}", timeout=30)
        return result.get("returncode") == 0


def main(backend: str, *, backend_config: str | None, fake: str | None, live: bool, host: str,
         persistent: bool) -> int:
    from conformance.run import KitRun, RunOptions

    started = time.monotonic()
    redact.register_environ()
    workdir = Path(tempfile.mkdtemp(prefix="kit-doctor-"))
    try:
        try:
            run = KitRun.start(RunOptions(backend=backend, backend_config=backend_config, host=host, fake=fake,
                                          live=live), workdir)
        except Exception as exc:
            print(f"FAIL  plugin loads          {type(exc).__name__}: {redact.redact(' '.join(str(exc).split()))}")
            print("      fix: check --backend (hermes-backend-kit backends lists known names) and install the extra")
            return 1
        try:
            rows = Doctor(run, persistent=persistent).check()
        finally:
            run.close()
    finally:
        leftovers.end_processes_under(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    for row in rows:
        print(f"{'ok  ' if row.ok else 'FAIL'}  {row.step:<20} {row.detail}")
        if not row.ok and row.fix:
            print(f"      fix: {row.fix}")
    fake_name = getattr(run.fake, "name", None)
    where = "live service" if live else f"{fake_name} fake" if fake_name else "backend, with no fake service"
    print(f"{sum(r.ok for r in rows)}/{len(rows)} steps ok against the {where} in {time.monotonic() - started:.1f}s")
    return 0 if all(r.ok for r in rows) else 1

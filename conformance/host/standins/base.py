"""Stand-in for ``tools.environments.base``: the BaseEnvironment a backend inherits.

It reproduces the documented behaviour of current Hermes hosts
(research/hermes-host.md sections 3.3 to 3.8): one bash script per command
that re-sources a session snapshot, cds, evals the command, re-dumps the
whole snapshot (exports, functions, aliases) and prints an in-band cwd
marker; a wait loop that drains output and turns timeouts into 124 and
interrupts into 130; bounded capture; fetch_file over base64; and the
one-shot ``environment_recreated`` flag.

As on current hosts, ``execute`` runs ``_before_execute`` on the calling
thread, then spawns (``_run_bash``) and waits on a worker thread under a
deadline of the command's timeout plus a grace (agent.deadline).  A backend
therefore cannot hand state from ``_before_execute`` to ``_run_bash``
through a thread-local.  The wait watches the interrupt flag of the calling
thread as well as its own, so an interrupt the agent sets on its tool thread
still stops the command.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import shlex
import signal
import threading
import time
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from conformance.host.standins import deadline as _deadline
from conformance.host.standins import interrupt as _interrupt
from conformance.host.standins import terminal_tool as _terminal_tool
from conformance.host.standins.base_output import (
    DEFAULT_MAX_OUTPUT_CHARS,
    ProcessHandle,
    _BoundedOutputCollector,
    _popen_bash,
    _ThreadedProcessHandle,
    drain,
)

__all__ = [
    "BaseEnvironment",
    "EnvironmentConnectionError",
    "FileFetchError",
    "ProcessHandle",
    "_ThreadedProcessHandle",
    "_popen_bash",
    "sanitize_task_id_for_path",
]

logger = logging.getLogger("tools.environments.base")

# Exported names matching these are per-session identity and never persist.
_SESSION_VAR_PREFIXES = ("HERMES_SESSION_", "HERMES_RPC_", "HERMES_CRON_AUTO_DELIVER_", "HERMES_BROWSER_CONTROL_")
_SESSION_VAR_NAMES = (
    "AI_AGENT",
    "HERMES_AGENT",
    "HERMES_DELEGATED_CHILD_CONTEXT",
    "HERMES_CRON_SESSION",
    "HERMES_KERNEL_DIR",
    "HERMES_UI_SESSION_ID",
)
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FETCH_TIMEOUT = 300
# The worker's deadline is the command's timeout plus this: the wait loop's own 124
# (with the output so far) comes first; the deadline only catches a wait that never returns.
_WAIT_BOUND_GRACE_S = 2.0


class EnvironmentConnectionError(RuntimeError):
    """The sandbox cannot be reached; the host shows the tool as degraded."""

    def __init__(self, reason: str, *, retry_hint: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retry_hint = retry_hint


class FileFetchError(RuntimeError):
    """fetch_file could not copy a sandbox file to the host."""


def sanitize_task_id_for_path(task_id: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(task_id))
    return cleaned.strip("._") or "default"


def _snapshot_dump(snapshot_path: str, *, bootstrap: bool, excluded: tuple[str, ...] = ()) -> str:
    """Shell that rewrites the snapshot atomically: exports, functions, aliases, options.

    The same dump runs at session start and after every command, so a
    function or alias a command defines is there for the next one.  It is
    written into a fresh ``mktemp`` file and published with ``mv``; a reader
    never sees half a snapshot and concurrent writers never share a file.
    Per-session variables are unset in a subshell before ``export -p`` so they
    never reach the file and the command's own shell keeps them.  Functions
    are chosen by name (``declare -F``), skipping private ``_name`` helpers.
    At session start a temp file that cannot be made fails the bootstrap;
    after a command the dump is best effort and the old snapshot stays.
    """
    snap = shlex.quote(snapshot_path)
    tmp = '"$__hermes_snap_tmp"'
    allocate = f"__hermes_snap_tmp=$(mktemp {shlex.quote(snapshot_path + '.tmp.XXXXXXXXXX')})"
    unset = " ".join(
        [
            *(f"${{!{prefix}*}}" for prefix in _SESSION_VAR_PREFIXES),
            *_SESSION_VAR_NAMES,
            *(shlex.quote(name) for name in excluded),
        ]
    )
    body = "\n".join(
        [
            f"  {{ ( unset {unset} 2>/dev/null; export -p ) || true; }} > {tmp}",
            "  __hermes_fns=$(declare -F | awk '{print $3}' | grep -vE '^_[^_]') || true",
            f'  if [ -n "$__hermes_fns" ]; then declare -f $__hermes_fns >> {tmp}; fi',
            f"  alias -p >> {tmp}",
            f"  printf '%s\\n' 'shopt -s expand_aliases' 'set +e' 'set +u' >> {tmp}",
            f"  mv -f {tmp} {snap}",
        ]
    )
    if bootstrap:
        return f"{allocate} || exit 1\n{{\n{body}\n}} || rm -f {tmp}"
    return f"{allocate} && {{\n{body}\n}} 2>/dev/null || rm -f {tmp} 2>/dev/null || true"


def session_bootstrap(snapshot_path: str, cwd: str, marker: str, *, excluded: tuple[str, ...] = ()) -> str:
    """The script a session starts with (run by a login bash): the first snapshot, the cwd, the marker.

    ``cwd`` is already quoted for ``cd`` (``$HOME`` and ``~`` forms stay unquoted).
    """
    return "\n".join(
        [
            "umask 077",
            _snapshot_dump(snapshot_path, bootstrap=True, excluded=excluded),
            f"builtin cd -- {cwd} 2>/dev/null || true",
            f"printf '\\n{marker}%s{marker}\\n' \"$(pwd -P)\"",
        ]
    )


def _new_collector(bounded_capture: bool) -> _BoundedOutputCollector:
    return _BoundedOutputCollector(DEFAULT_MAX_OUTPUT_CHARS if bounded_capture else None)


class BaseEnvironment(ABC):
    _stdin_mode: str = "pipe"
    _snapshot_timeout: int = 30
    is_local: bool = False

    def __init__(self, cwd: str, timeout: int, env: dict[str, str] | None = None):
        self.cwd = cwd
        self.timeout = timeout
        self.env = env or {}
        self._session_id = uuid.uuid4().hex[:12]
        tmp = self.get_temp_dir().rstrip("/") or "/"
        self._snapshot_path = f"{tmp}/hermes-snap-{self._session_id}.sh"
        self._cwd_file = f"{tmp}/hermes-cwd-{self._session_id}.txt"
        self._cwd_marker = f"__HERMES_CWD_{self._session_id}__"
        self._snapshot_ready = False
        self._prefer_nonlogin = False
        self._recreated_pending = False
        self._snapshot_passthrough_names: set[str] = set()

    # -- what a backend writes ---------------------------------------------
    def _run_bash(
        self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
    ) -> ProcessHandle:
        raise NotImplementedError(f"{type(self).__name__} must implement _run_bash()")

    @abstractmethod
    def cleanup(self) -> None:
        """Release the sandbox."""

    # -- hooks a backend may override --------------------------------------
    def get_temp_dir(self) -> str:
        return "/tmp"

    def _before_execute(self) -> None:
        return None

    def _kill_process(self, proc: ProcessHandle) -> None:
        try:
            proc.kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass

    def _force_kill_process(self, proc: ProcessHandle) -> None:
        self._kill_process(proc)

    def _update_cwd(self, result: dict[str, Any]) -> None:
        self._extract_cwd_from_output(result)

    def _mark_recreated(self) -> None:
        self._recreated_pending = True

    # -- profile-scoped passthrough names ------------------------------------
    # A backend that forwards passthrough values itself on every command sets this: under profile
    # multiplexing those names then never enter the snapshot, so a sandbox shared by profiles does
    # not re-export one profile's value for the next.
    _profile_scoped_passthrough: bool = False

    def _additional_profile_scoped_passthrough_names(self) -> tuple[str, ...]:
        return ()

    def _snapshot_excluded_passthrough_names(self) -> tuple[str, ...]:
        """Names kept out of the snapshot; once excluded, a name stays excluded for this environment."""
        if not self._profile_scoped_passthrough:
            return ()
        try:
            from agent.secret_scope import is_multiplex_active

            if is_multiplex_active():
                from tools.env_passthrough import get_all_passthrough

                names = (*get_all_passthrough(), *self._additional_profile_scoped_passthrough_names())
                self._snapshot_passthrough_names.update(
                    n for n in names if isinstance(n, str) and _SHELL_NAME.fullmatch(n)
                )
        except Exception:
            logger.debug("profile-scoped snapshot exclusions not refreshed", exc_info=True)
        return tuple(sorted(self._snapshot_passthrough_names))

    # -- session snapshot ---------------------------------------------------
    def init_session(self) -> None:
        bootstrap = session_bootstrap(
            self._snapshot_path,
            self._quote_cwd_for_cd(self.cwd),
            self._cwd_marker,
            excluded=self._snapshot_excluded_passthrough_names(),
        )
        try:
            proc = self._run_bash(bootstrap, login=True, timeout=self._snapshot_timeout)
            result = self._wait_for_process(proc, timeout=self._snapshot_timeout)
            if int(result.get("returncode") or 0) != 0:
                raise RuntimeError(f"snapshot bootstrap exited {result.get('returncode')}")
            self._snapshot_ready = True
            self._update_cwd(result)
        except Exception as exc:
            self._snapshot_ready = False
            try:
                probe = self._run_bash("true", login=False, timeout=15)
                self._prefer_nonlogin = self._wait_for_process(probe, timeout=15).get("returncode") == 0
            except Exception:
                self._prefer_nonlogin = False
            logger.warning("init_session failed (session=%s): %s", self._session_id, exc)

    @staticmethod
    def _quote_cwd_for_cd(cwd: str) -> str:
        if cwd == "~":
            return cwd
        if cwd == "~/":
            return "$HOME"
        if cwd.startswith("~/"):
            return "$HOME/" + shlex.quote(cwd[2:])
        return shlex.quote(cwd)

    def _wrap_command(self, command: str, cwd: str) -> str:
        marker = self._cwd_marker
        excluded = self._snapshot_excluded_passthrough_names()
        # The command's own environment decides an excluded name, never an older snapshot:
        # remember it before sourcing, then put it back (or unset it) afterwards.
        keep = [f"__hermes_pt_{i}_set=${{{n}+x}} __hermes_pt_{i}_val=${{{n}-}}" for i, n in enumerate(excluded)]
        put_back = [
            f'if [ "$__hermes_pt_{i}_set" = x ]; then export {n}="$__hermes_pt_{i}_val"; else unset {n}; fi; '
            f"unset __hermes_pt_{i}_set __hermes_pt_{i}_val"
            for i, n in enumerate(excluded)
        ]
        lines = list(keep)
        if self._snapshot_ready:
            lines.append(f"source {shlex.quote(self._snapshot_path)} >/dev/null 2>&1 || true")
        lines += put_back
        lines += [
            'export AI_AGENT="${AI_AGENT:-hermes-agent}" HERMES_AGENT="${HERMES_AGENT:-true}"',
            'export GIT_PAGER="${GIT_PAGER:-cat}" PAGER="${PAGER:-cat}"',
            f"builtin cd -- {self._quote_cwd_for_cd(cwd)} || exit 126",
            "eval " + shlex.quote(command),
            "__hermes_ec=$?",
            "umask 077",
        ]
        if self._snapshot_ready:
            lines.append(_snapshot_dump(self._snapshot_path, bootstrap=False, excluded=excluded))
        lines += [f"printf '\\n{marker}%s{marker}\\n' \"$(pwd -P)\"", "exit $__hermes_ec"]
        return "\n".join(lines)

    @staticmethod
    def _embed_stdin_heredoc(command: str, stdin_data: str) -> str:
        delimiter = f"HERMES_STDIN_{uuid.uuid4().hex[:12]}"
        return f"{command} << '{delimiter}'\n{stdin_data}\n{delimiter}"

    # -- waiting --------------------------------------------------------------
    def _wait_for_process(
        self,
        proc: ProcessHandle,
        timeout: int = 120,
        *,
        bounded_capture: bool = False,
        watch_interrupt_tid: int | None = None,
        output: _BoundedOutputCollector | None = None,
    ) -> dict[str, Any]:
        """Drain and wait; 130 on an interrupt of this thread or of ``watch_interrupt_tid``
        (the thread that called execute), 124 with the output so far on a timeout."""
        sink = output if output is not None else _new_collector(bounded_capture)
        drainer = drain(proc, sink)
        deadline = time.monotonic() + timeout
        pause = 0.005
        try:
            while proc.poll() is None:
                if _interrupt.is_interrupted() or _interrupt.is_thread_interrupted(watch_interrupt_tid):
                    self._kill_process(proc)
                    drainer.join(2)
                    return self._render(sink, "\n[Command interrupted]", 130)
                if time.monotonic() > deadline:
                    self._kill_process(proc)
                    drainer.join(2)
                    return self._render(sink, f"\n[Command timed out after {timeout}s]", 124)
                time.sleep(pause)
                pause = min(pause * 1.5, 0.2)
        except (KeyboardInterrupt, SystemExit):
            self._kill_process(proc)
            drainer.join(2)
            raise
        drainer.join(2)
        try:
            if proc.stdout is not None:
                proc.stdout.close()
        except Exception:
            pass
        result = self._render(sink, "", proc.returncode)
        stdin_thread = getattr(proc, "_hermes_stdin_thread", None)
        if stdin_thread is not None:
            stdin_thread.join(2)
        errors = list(getattr(proc, "_hermes_stdin_errors", None) or [])
        if errors:
            result["stdin_error"] = str(errors[0])
            result["output"] += f"\n[stdin write failed: {errors[0]}]"
        return result

    @staticmethod
    def _render(sink: _BoundedOutputCollector, suffix: str, code: int | None) -> dict[str, Any]:
        text, truncated = sink.render(suffix)
        if suffix and sink.total == 0:
            text = text.lstrip()
        result: dict[str, Any] = {"output": text, "returncode": code}
        if truncated:
            result["output_total_chars"] = sink.total
        return result

    def _extract_cwd_from_output(self, result: dict[str, Any]) -> None:
        output = result.get("output", "")
        marker = self._cwd_marker
        close = output.rfind(marker)
        if close == -1:
            return
        open_ = output.rfind(marker, max(0, close - 4096), close)
        if open_ == -1:
            return
        path = output[open_ + len(marker) : close].strip()
        if path:
            self.cwd = path
            result["cwd"] = path
            result["cwd_observed"] = True
        start = output.rfind("\n", 0, open_)
        start = open_ if start == -1 else start
        end = output.find("\n", close + len(marker))
        end = len(output) if end == -1 else end + 1
        result["output"] = output[:start] + output[end:]

    # -- the host's entry point ---------------------------------------------
    def execute(
        self,
        command: str,
        cwd: str = "",
        *,
        timeout: int | None = None,
        stdin_data: str | None = None,
        rewrite_compound_background: bool = True,
        bounded_capture: bool = False,
        yield_handler: Any = None,
    ) -> dict[str, Any]:
        self._before_execute()
        command, sudo_stdin = _terminal_tool._transform_sudo_command(command)
        if rewrite_compound_background:
            command = _terminal_tool._rewrite_compound_background(command)
        effective_timeout = timeout or self.timeout
        stdin = (sudo_stdin or "") + stdin_data if stdin_data is not None else sudo_stdin
        if stdin and self._stdin_mode == "heredoc":
            command = self._embed_stdin_heredoc(command, stdin)
            stdin = None
        script = self._wrap_command(command, cwd or self.cwd)
        login = not self._snapshot_ready and not self._prefer_nonlogin

        caller = threading.get_ident()
        sink = _new_collector(bounded_capture)
        spawned: list[ProcessHandle] = []

        def spawn_and_wait() -> dict[str, Any]:
            proc = self._run_bash(script, login=login, timeout=effective_timeout, stdin_data=stdin)
            spawned.append(proc)
            return self._wait_for_process(
                proc,
                timeout=effective_timeout,
                bounded_capture=bounded_capture,
                watch_interrupt_tid=caller,
                output=sink,
            )

        def stop_spawned() -> None:
            if spawned:
                self._kill_spawned(spawned[0])

        try:
            bound = float(effective_timeout)
        except (TypeError, ValueError):
            bound = 120.0  # a timeout that is not a number must not remove the deadline
        try:
            outcome = _deadline.run_bounded_sync(
                spawn_and_wait,
                bound + _WAIT_BOUND_GRACE_S,
                label=f"terminal.wait:{type(self).__name__}",
                on_timeout=stop_spawned,
            )
        except (KeyboardInterrupt, SystemExit):
            stop_spawned()
            raise
        if outcome.timed_out:
            result = self._render(sink, f"\n[Command timed out after {effective_timeout}s]", 124)
        else:
            result = outcome.value
        self._update_cwd(result)
        if self._recreated_pending:
            self._recreated_pending = False
            result["environment_recreated"] = True
        return result

    def _kill_spawned(self, proc: ProcessHandle) -> None:
        """The deadline's last resort for a wait that never returned: kill the command and,
        when it leads a process group of its own, that group."""
        try:
            self._kill_process(proc)
        except Exception:
            logger.debug("killing a command past its deadline failed", exc_info=True)
        pid = getattr(proc, "pid", None)
        if not isinstance(pid, int) or pid <= 0:
            return
        try:
            if os.getpgid(pid) == pid and pid != os.getpgid(0):
                os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass

    # -- file fetch over exec ------------------------------------------------
    def fetch_file(self, remote_path: str, local_dest: str | os.PathLike[str], *, max_bytes: int) -> None:
        """Copy a regular sandbox file to ``local_dest`` (whose directory must exist).

        Base64 over execute(), read with ``head -c max_bytes+1`` inside the
        sandbox so an endless file cannot flood the host; the payload sits
        between random fences so shell noise around it does not corrupt it.
        Raises FileFetchError for a missing, unreadable or oversized file.
        """
        fence = f"__HERMES_FETCH_{uuid.uuid4().hex[:12]}__"
        q = shlex.quote(remote_path)
        command = (
            f"[ -f {q} ] && [ -r {q} ] || exit 3; echo {fence}; "
            f"head -c {int(max_bytes) + 1} < {q} | base64 || exit 4; echo {fence}"
        )
        result = self.execute(command, timeout=_FETCH_TIMEOUT, rewrite_compound_background=False)
        output = result.get("output") or ""
        first, last = output.find(fence), output.rfind(fence)
        if int(result.get("returncode") or 0) != 0 or first == -1 or last <= first:
            raise FileFetchError(
                f"cannot read {remote_path!r} in the sandbox: it is missing, not a regular file, or unreadable"
            )
        try:
            data = base64.b64decode("".join(output[first + len(fence) : last].split()), validate=True)
        except (ValueError, binascii.Error) as exc:
            raise FileFetchError(f"the copy of {remote_path!r} arrived corrupted: {exc}") from exc
        if len(data) > max_bytes:
            raise FileFetchError(f"{remote_path!r} is larger than the {max_bytes}-byte limit of this fetch")
        Path(local_dest).write_bytes(data)

    def fetch_realpath(self, remote_path: str) -> str | None:
        """The sandbox's ``readlink -f`` of ``remote_path``, or None when it cannot be resolved."""
        result = self.execute(
            f"readlink -f -- {shlex.quote(remote_path)} 2>/dev/null", rewrite_compound_background=False
        )
        if int(result.get("returncode") or 0) != 0:
            return None
        lines = [line.strip() for line in (result.get("output") or "").splitlines()]
        return next((line for line in reversed(lines) if line.startswith("/")), None)

    # -- teardown ----------------------------------------------------------------
    def stop(self) -> None:
        self.cleanup()

    def __del__(self) -> None:
        try:
            self.cleanup()
        except Exception:
            pass

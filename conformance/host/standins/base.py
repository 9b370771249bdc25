"""Stand-in for ``tools.environments.base``: the BaseEnvironment a backend inherits.

It reproduces the documented behaviour of current Hermes hosts
(research/hermes-host.md sections 3.3 to 3.8): one bash script per command
that re-sources a session snapshot, cds, evals the command, re-dumps the
snapshot and prints an in-band cwd marker; a wait loop that drains output
and turns timeouts into 124 and interrupts into 130; bounded capture;
fetch_file over base64; and the one-shot ``environment_recreated`` flag.

The wait loop runs on the calling thread, as in hermes-agent 0.19.0, so a
per-thread interrupt set on the caller is seen directly.
"""

from __future__ import annotations

import base64
import logging
import os
import shlex
import time
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

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
_SESSION_VAR_PATTERNS = ("HERMES_SESSION_*", "HERMES_RPC_*", "HERMES_CRON_AUTO_DELIVER_*",
                         "HERMES_BROWSER_CONTROL_*")
_SESSION_VAR_NAMES = ("AI_AGENT", "HERMES_AGENT", "HERMES_DELEGATED_CHILD_CONTEXT",
                      "HERMES_CRON_SESSION", "HERMES_KERNEL_DIR", "HERMES_UI_SESSION_ID")
_FETCH_TIMEOUT = 300


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


def _dump_snapshot_script(snapshot_path: str, *, full: bool) -> str:
    """Shell that rewrites the snapshot atomically, minus per-session variables.

    ``full`` (session start) also captures functions, aliases and shell
    options; after each command only the exports are re-dumped, as the host
    does.  The dump runs in a subshell so unsetting the session variables
    there does not touch the command's shell; $BASHPID keeps concurrent
    writers' temp files apart, and mv publishes the snapshot in one step.
    """
    tmp = shlex.quote(snapshot_path + ".tmp.") + "$BASHPID"
    snap = shlex.quote(snapshot_path)
    session_globs = "|".join(_SESSION_VAR_PATTERNS)
    extras = (
        "__hermes_f=$(declare -F | awk '{print $3}' | grep -vE '^_[^_]'); "
        "[ -z \"$__hermes_f\" ] || declare -f $__hermes_f; alias -p; "
        "echo 'shopt -s expand_aliases'; echo 'set +e'; echo 'set +u' "
    ) if full else ""
    return (
        f"__hermes_t={tmp}; "
        "{ ( for __hermes_v in $(compgen -e); do case $__hermes_v in "
        f"{session_globs}) unset \"$__hermes_v\";; esac; done; "
        f"unset {' '.join(_SESSION_VAR_NAMES)}; export -p; {extras}"
        f') > "$__hermes_t" && mv -f "$__hermes_t" {snap}; }} 2>/dev/null '
        '|| rm -f "$__hermes_t" 2>/dev/null || true'
    )


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

    # -- what a backend writes ---------------------------------------------
    def _run_bash(self, cmd_string: str, *, login: bool = False, timeout: int = 120,
                  stdin_data: str | None = None) -> ProcessHandle:
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

    # -- session snapshot ---------------------------------------------------
    def init_session(self) -> None:
        marker = self._cwd_marker
        bootstrap = "\n".join([
            "umask 077",
            _dump_snapshot_script(self._snapshot_path, full=True),
            f"builtin cd -- {self._quote_cwd_for_cd(self.cwd)} 2>/dev/null || true",
            f"printf '\\n{marker}%s{marker}\\n' \"$(pwd -P)\"",
        ])
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
        lines = []
        if self._snapshot_ready:
            lines.append(f"source {shlex.quote(self._snapshot_path)} >/dev/null 2>&1 || true")
        lines += [
            "export AI_AGENT=1 HERMES_AGENT=1 GIT_PAGER=${GIT_PAGER:-cat} PAGER=${PAGER:-cat}",
            f"builtin cd -- {self._quote_cwd_for_cd(cwd)} || exit 126",
            "eval " + shlex.quote(command),
            "__hermes_ec=$?",
            "umask 077",
        ]
        if self._snapshot_ready:
            lines.append(_dump_snapshot_script(self._snapshot_path, full=False))
        lines += [f"printf '\\n{marker}%s{marker}\\n' \"$(pwd -P)\"", "exit $__hermes_ec"]
        return "\n".join(lines)

    @staticmethod
    def _embed_stdin_heredoc(command: str, stdin_data: str) -> str:
        delimiter = f"HERMES_STDIN_{uuid.uuid4().hex[:12]}"
        return f"{command} << '{delimiter}'\n{stdin_data}\n{delimiter}"

    # -- waiting --------------------------------------------------------------
    def _wait_for_process(self, proc: ProcessHandle, timeout: int = 120, *,
                          bounded_capture: bool = False) -> dict[str, Any]:
        sink = _BoundedOutputCollector(DEFAULT_MAX_OUTPUT_CHARS if bounded_capture else None)
        drainer = drain(proc, sink)
        deadline = time.monotonic() + timeout
        pause = 0.005
        try:
            while proc.poll() is None:
                if _interrupt.is_interrupted():
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
        path = output[open_ + len(marker):close].strip()
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
    def execute(self, command: str, cwd: str = "", *, timeout: int | None = None,
                stdin_data: str | None = None, rewrite_compound_background: bool = True,
                bounded_capture: bool = False, yield_handler: Any = None) -> dict[str, Any]:
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
        proc = self._run_bash(script, login=login, timeout=effective_timeout, stdin_data=stdin)
        result = self._wait_for_process(proc, timeout=effective_timeout, bounded_capture=bounded_capture)
        self._update_cwd(result)
        if self._recreated_pending:
            self._recreated_pending = False
            result["environment_recreated"] = True
        return result

    # -- file fetch over exec ------------------------------------------------
    def fetch_file(self, remote_path: str, local_dest: str | os.PathLike[str], *,
                   max_bytes: int = 50 * 1024 * 1024) -> Path:
        tag = uuid.uuid4().hex[:10]
        begin, end = f"__HERMES_FETCH_BEGIN_{tag}__", f"__HERMES_FETCH_END_{tag}__"
        q = shlex.quote(remote_path)
        command = (
            f"[ -f {q} ] || {{ echo 'missing'; exit 3; }}; "
            f"size=$(wc -c < {q}); [ \"$size\" -le {int(max_bytes)} ] || {{ echo \"too large: $size\"; exit 4; }}; "
            f"echo {begin}; head -c {int(max_bytes)} {q} | base64; echo {end}"
        )
        result = self.execute(command, timeout=_FETCH_TIMEOUT)
        output = result.get("output", "")
        if result.get("returncode") != 0 or begin not in output or end not in output:
            raise FileFetchError(f"cannot fetch {remote_path}: {output.strip()[-200:] or 'no output'}")
        payload = output.split(begin, 1)[1].split(end, 1)[0]
        data = base64.b64decode("".join(payload.split()))
        dest = Path(local_dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        return dest

    def fetch_realpath(self, path: str) -> str:
        result = self.execute(f"readlink -f -- {shlex.quote(path)}", timeout=_FETCH_TIMEOUT)
        resolved = result.get("output", "").strip()
        if result.get("returncode") != 0 or not resolved:
            raise FileFetchError(f"cannot resolve {path}")
        return resolved.splitlines()[-1]

    # -- teardown ----------------------------------------------------------------
    def stop(self) -> None:
        self.cleanup()

    def __del__(self) -> None:
        try:
            self.cleanup()
        except Exception:
            pass


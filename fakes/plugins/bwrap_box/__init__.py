"""bwrap_box: each command in a bubblewrap sandbox of its own, as Hermes's own bubblewrap backend runs it.

A fixture of the kit's own tests, loaded as a plugin directory.  Every command
is ``bwrap --unshare-all`` over a read-only view of this machine with a
private tmpfs ``/tmp`` and the environment's working directory bound
writable: a fresh PID, mount, network, IPC and UTS namespace per command.  So
it keeps files in its working directory, but a background job dies with the
command that started it and nothing in ``/tmp`` outlives a command: the
kit's verdicts on it must be about those, not about where the kit keeps its
own files.  It claims isolation (``is_container``, ``skip_container_guards``).

``terminal.bwrap_box_sandboxing: false`` runs each command unsandboxed while
the claims stay: the hazard of a host that lacks the hook applying the
sandbox, which the kit must catch on an isolation clause.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from typing import Any

SETTING = "bwrap_box_sandboxing"


def _sandboxing(config: dict[str, Any] | None) -> bool:
    value = (config or {}).get(SETTING, True)
    return str(value).strip().lower() not in ("false", "0", "no", "off")


def _provider() -> Any:
    from agent.terminal_env_provider import TerminalEnvironmentProvider
    from tools.environments.base import BaseEnvironment
    from tools.environments.base_output import _pipe_stdin

    class BwrapEnvironment(BaseEnvironment):
        def __init__(self, *, cwd: str, timeout: int, sandboxed: bool):
            self._workspace = os.path.realpath(cwd or os.getcwd())
            self._sandboxed = sandboxed
            # /tmp is private to each command: Hermes's session files live in the workspace instead.
            self._temp = os.path.join(self._workspace, ".bwrap-box-tmp")
            os.makedirs(self._temp, exist_ok=True)
            super().__init__(cwd=self._workspace, timeout=timeout)
            self.init_session()

        def get_temp_dir(self) -> str:
            return self._temp

        def _argv(self, cmd: str, login: bool) -> list[str]:
            shell = ["bash", "-l", "-c", cmd] if login else ["bash", "-c", cmd]
            if not self._sandboxed:
                return shell
            w = self._workspace
            return [
                *("bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"),
                *("--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev", "--bind", w, w, "--chdir", w),
                *shell,
            ]

        def _run_bash(
            self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
        ) -> Any:
            proc = subprocess.Popen(
                self._argv(cmd_string, login),
                cwd=self._workspace,
                start_new_session=True,
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                encoding="utf-8",
                errors="replace",
            )
            if stdin_data is not None:
                proc._hermes_stdin_thread = _pipe_stdin(proc, stdin_data)  # type: ignore[attr-defined]
            return proc

        def _kill_process(self, proc: Any) -> None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass

        def cleanup(self, force_remove: bool = False) -> None:
            return None

    class BwrapBoxProvider(TerminalEnvironmentProvider):
        name = "bwrap_box"
        is_remote = False
        is_container = True

        @property
        def skip_container_guards(self) -> bool:
            return True

        def is_available(self) -> bool:
            return shutil.which("bwrap") is not None and shutil.which("bash") is not None

        def probe(self) -> tuple[str, str]:
            if shutil.which("bwrap") is None:
                return ("unavailable", "bubblewrap is not installed (apt-get install bubblewrap)")
            return ("ready", "bubblewrap sandbox per command")

        def create_environment(self, *, cwd: str = "", timeout: int = 180, **kwargs: Any) -> Any:
            from hermes_cli.config import load_config

            terminal = (load_config() or {}).get("terminal") or {}
            return BwrapEnvironment(cwd=cwd, timeout=timeout, sandboxed=_sandboxing(terminal))

    return BwrapBoxProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "bwrap_box")

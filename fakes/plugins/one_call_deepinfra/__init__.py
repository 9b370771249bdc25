"""one_call_deepinfra: a DeepInfra backend that makes one call per command and nothing more.

A fixture of the kit's bench, loaded as a plugin directory: what a vendor's
own thin plugin does, with no policy around the SDK.  ``Sandbox.create``
(create, then wait until running), one ``Sandbox.exec`` of ``bash -c`` per
command with stdin embedded by the host (heredoc), ``terminate`` on cleanup.
No state read before a command, no recovery, no kill of one command, no file
sync: it is the floor of calls and round trips per command that
``bench --backend fakes/plugins/one_call_deepinfra --reference deepinfra
--rtt 50`` holds the reference backend against, not a backend to certify.
"""

from __future__ import annotations

import os
import threading
from typing import Any

KEY_VAR, URL_VAR = "DEEPINFRA_API_KEY", "DEEPINFRA_BASE_URL"
WORKSPACE = "/workspace"
_clients: dict[tuple[str, str | None], Any] = {}
_lock = threading.Lock()


def _client() -> Any:
    """One SDK client per key and endpoint for the process (its connection pool and TLS context)."""
    from deepinfra import DeepInfraClient

    key, url = os.environ.get(KEY_VAR, ""), os.environ.get(URL_VAR)
    with _lock:
        if (key, url) not in _clients:
            _clients[(key, url)] = DeepInfraClient(api_key=key, base_url=url, timeout=60.0)
        return _clients[(key, url)]


def _provider() -> Any:
    from agent.terminal_env_provider import TerminalEnvironmentProvider
    from tools.environments.base import BaseEnvironment
    from tools.environments.base_output import _ThreadedProcessHandle

    class OneCallEnvironment(BaseEnvironment):
        _stdin_mode = "heredoc"

        def __init__(self, *, cwd: str, timeout: int):
            from deepinfra import Sandbox

            self._sandbox: Any = Sandbox.create(wait=True, client=_client())
            super().__init__(cwd=cwd, timeout=timeout)
            self.init_session()

        def get_temp_dir(self) -> str:
            return "/tmp"

        def execute(self, command: str, cwd: str = "", **kwargs: Any) -> dict[str, Any]:
            return super().execute(command, "" if cwd == "/root" else cwd, **kwargs)

        def _run_bash(
            self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
        ) -> Any:
            argv = ["bash", "-l", "-c", cmd_string] if login else ["bash", "-c", cmd_string]

            def run() -> tuple[str, int]:
                try:
                    done = self._sandbox.exec(*argv, timeout=timeout)
                except Exception as exc:
                    return f"[one_call_deepinfra: {type(exc).__name__}: {exc}]", 1
                return f"{done.stdout or ''}{done.stderr or ''}", int(done.returncode)

            return _ThreadedProcessHandle(run)

        def cleanup(self, force_remove: bool = False) -> None:
            sandbox, self._sandbox = getattr(self, "_sandbox", None), None
            if sandbox is not None:
                try:
                    sandbox.terminate()
                except Exception:
                    pass

    class OneCallProvider(TerminalEnvironmentProvider):
        name = "one_call_deepinfra"
        display_name = "DeepInfra (one call per command)"
        is_remote = True
        is_container = True
        default_cwd = WORKSPACE

        def is_available(self) -> bool:
            return bool(os.environ.get(KEY_VAR))

        def create_environment(self, *, cwd: str = "", timeout: int = 180, **kwargs: Any) -> Any:
            return OneCallEnvironment(cwd=WORKSPACE if cwd in ("", "/root", "~") else cwd, timeout=timeout)

    return OneCallProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "one_call_deepinfra")

"""Which behaviours the active host's BaseEnvironment composes.

Detected by running each behaviour on a tiny local-bash BaseEnvironment
subclass of the active host (a fraction of a second in all), never from a
version string.  The result decides whether a host-provided clause applies.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

ProbeFn = Callable[[Any], bool]


def _probe_class(base_cls: type) -> type:
    class ProbeShell(base_cls):  # type: ignore[misc, valid-type]
        """Local bash in a private temp dir; exists only to observe the host."""

        def __init__(self) -> None:
            self._dir = tempfile.mkdtemp(prefix="kit-host-probe-")
            super().__init__(cwd=self._dir, timeout=10)
            self.init_session()

        def get_temp_dir(self) -> str:
            return self._dir

        def _run_bash(self, cmd_string: str, *, login: bool = False, timeout: int = 120,
                      stdin_data: str | None = None):
            args = ["bash", "-l" if login else "--noprofile", "-c", cmd_string]
            proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self._dir,
                     "LANG": "C.UTF-8"},
                start_new_session=True,
            )
            if stdin_data is not None:
                assert proc.stdin is not None
                proc.stdin.write(stdin_data)
                proc.stdin.close()
            return proc

        def cleanup(self) -> None:
            shutil.rmtree(self._dir, ignore_errors=True)

    return ProbeShell


def _cwd_marker(env: Any) -> bool:
    result = env.execute("cd /")
    return env.cwd == "/" and "__HERMES_CWD_" not in result.get("output", "")


def _cwd_observed(env: Any) -> bool:
    result = env.execute("cd /")
    return result.get("cwd_observed") is True and result.get("cwd") == "/"


def _snapshot(env: Any) -> bool:
    env.execute("export KIT_PROBE_VAR=kept")
    return env.execute("echo ${KIT_PROBE_VAR-unset}").get("output", "").strip() == "kept"


def _excludes_session_vars(env: Any) -> bool:
    env.execute("export HERMES_SESSION_KIT_PROBE=1 HERMES_RPC_KIT_PROBE=1")
    out = env.execute("echo ${HERMES_SESSION_KIT_PROBE-unset} ${HERMES_RPC_KIT_PROBE-unset}")
    return out.get("output", "").split() == ["unset", "unset"]


def _recreated(env: Any) -> bool:
    mark = getattr(env, "_mark_recreated", None)
    if not callable(mark):
        return False
    mark()
    first = env.execute("true").get("environment_recreated")
    second = env.execute("true").get("environment_recreated")
    return first is True and not second


def _bounded(env: Any) -> bool:
    out = env.execute("seq 1 40000", bounded_capture=True).get("output", "")
    return "OUTPUT TRUNCATED" in out and len(out) < 100_000


def _fetch(env: Any) -> bool:
    return callable(getattr(env, "fetch_file", None)) and callable(getattr(env, "fetch_realpath", None))


def _heredoc(env: Any) -> bool:
    env._stdin_mode = "heredoc"
    try:
        return env.execute("cat", stdin_data="via heredoc").get("output", "").strip() == "via heredoc"
    finally:
        env._stdin_mode = "pipe"


def _sudo(env: Any) -> bool:
    saved = os.environ.get("SUDO_PASSWORD")
    os.environ["SUDO_PASSWORD"] = "kit-probe"
    try:
        out = env.execute("function sudo { printf '%s|' \"$@\"; head -n1; }; sudo true")
    finally:
        if saved is None:
            os.environ.pop("SUDO_PASSWORD", None)
        else:
            os.environ["SUDO_PASSWORD"] = saved
    return out.get("output", "").strip() == "-S|-p||true|kit-probe"


def _wait_loop(env: Any) -> bool:
    return callable(getattr(env, "_wait_for_process", None))


PROBES: dict[str, ProbeFn] = {
    "wait-loop": _wait_loop,
    "session-snapshot": _snapshot,
    "cwd-marker": _cwd_marker,
    "cwd-observed": _cwd_observed,
    "snapshot-excludes-session-vars": _excludes_session_vars,
    "fetch-file": _fetch,
    "recreated-flag": _recreated,
    "bounded-capture": _bounded,
    "heredoc-stdin": _heredoc,
    "sudo-rewrite": _sudo,
}


def detect() -> dict[str, bool]:
    """Probe every feature on the active host; a probe that raises means absent."""
    base_cls = importlib.import_module("tools.environments.base").BaseEnvironment
    env = _probe_class(base_cls)()
    found: dict[str, bool] = {}
    try:
        for name, probe in PROBES.items():
            try:
                found[name] = bool(probe(env))
            except Exception:
                found[name] = False
    finally:
        env.cleanup()
    return found

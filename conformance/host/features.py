"""Which behaviours the active host's BaseEnvironment composes, and what its provider ABI hands a provider.

Detected by running each behaviour on a tiny local-bash BaseEnvironment
subclass of the active host (a fraction of a second in all), never from a
version string.  The result decides whether a host-provided clause applies,
and it tells the host shapes apart: hermes-agent 0.19.0 spawns and waits on
the caller's thread, re-dumps only exports after a command and has no
fetch_file; current hosts (0.21) spawn and wait on a worker thread, re-dump
functions and aliases too, and fetch with a keyword-only ``max_bytes``.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

ProbeFn = Callable[[Any], bool]
_MISSING = object()


def _probe_class(base_cls: type) -> type:
    class ProbeShell(base_cls):  # type: ignore[misc]  # the active host's class, known only at run time
        """Local bash in a private temp dir; exists only to observe the host."""

        def __init__(self) -> None:
            self._dir = tempfile.mkdtemp(prefix="kit-host-probe-")
            self.threads: dict[str, int] = {}  # hook name -> the thread it last ran on
            super().__init__(cwd=self._dir, timeout=10)
            self.init_session()

        def get_temp_dir(self) -> str:
            return self._dir

        def _before_execute(self) -> None:
            self.threads["_before_execute"] = threading.get_ident()
            super()._before_execute()

        def _run_bash(
            self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
        ) -> subprocess.Popen[str]:
            self.threads["_run_bash"] = threading.get_ident()
            args = ["bash", "-l" if login else "--noprofile", "-c", cmd_string]
            proc = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self._dir, "LANG": "C.UTF-8"},
                start_new_session=True,
            )
            if stdin_data is not None:
                assert proc.stdin is not None
                try:
                    proc.stdin.write(stdin_data)
                except UnicodeEncodeError as exc:  # left where the host's wait loop looks for it
                    proc._hermes_stdin_errors = [exc]  # type: ignore[attr-defined]
                proc.stdin.close()
            return proc

        def cleanup(self) -> None:
            shutil.rmtree(self._dir, ignore_errors=True)

    return ProbeShell


def _run(env: Any, command: str, **kwargs: Any) -> dict[str, Any]:
    """env.execute's result: the host's class is only known at run time."""
    result: dict[str, Any] = env.execute(command, **kwargs)
    return result


def _output(env: Any, command: str, **kwargs: Any) -> str:
    return str(_run(env, command, **kwargs).get("output", ""))


def _cwd_marker(env: Any) -> bool:
    output = _output(env, "cd /")
    return bool(env.cwd == "/") and "__HERMES_CWD_" not in output


def _cwd_observed(env: Any) -> bool:
    result = _run(env, "cd /")
    return result.get("cwd_observed") is True and result.get("cwd") == "/"


def _snapshot(env: Any) -> bool:
    env.execute("export KIT_PROBE_VAR=kept")
    return _output(env, "echo ${KIT_PROBE_VAR-unset}").strip() == "kept"


# Every per-session name the current host's snapshot leaves out (base_session_env.py).
_SESSION_VARS = (
    "HERMES_SESSION_KIT_PROBE",
    "HERMES_RPC_KIT_PROBE",
    "HERMES_KERNEL_DIR",
    "HERMES_CRON_SESSION",
    "HERMES_CRON_AUTO_DELIVER_KIT_PROBE",
    "HERMES_BROWSER_CONTROL_KIT_PROBE",
    "HERMES_DELEGATED_CHILD_CONTEXT",
    "HERMES_UI_SESSION_ID",
)


def _excludes_session_vars(env: Any) -> bool:
    env.execute("export " + " ".join(f"{n}=1" for n in _SESSION_VARS) + " AI_AGENT=kit-probe HERMES_AGENT=kit-probe")
    out = _output(env, "echo " + " ".join(f"${{{n}-unset}}" for n in _SESSION_VARS) + " ${AI_AGENT} ${HERMES_AGENT}")
    return out.split() == ["unset"] * len(_SESSION_VARS) + ["hermes-agent", "true"]


def _recreated(env: Any) -> bool:
    mark = getattr(env, "_mark_recreated", None)
    if not callable(mark):
        return False
    mark()
    first = _run(env, "true").get("environment_recreated")
    second = _run(env, "true").get("environment_recreated")
    return first is True and not second


def _bounded(env: Any) -> bool:
    out = _output(env, "seq 1 40000", bounded_capture=True)
    return "OUTPUT TRUNCATED" in out and len(out) < 100_000


def _functions_redumped(env: Any) -> bool:
    env.execute("kit_probe_fn() { echo kept-function; }; alias kit_probe_alias='echo kept-alias'")
    out = _output(env, "kit_probe_fn; kit_probe_alias")
    return out.split() == ["kept-function", "kept-alias"]


def _worker_thread(env: Any) -> bool:
    env.threads.clear()
    env.execute("true")
    caller = threading.get_ident()
    threads: dict[str, int] = env.threads
    return threads.get("_before_execute") == caller and threads.get("_run_bash") not in (None, caller)


def _fetch(env: Any) -> bool:
    """fetch_file as Hermes's callers call it (keyword max_bytes) copies exactly; realpath resolves."""
    data = bytes(range(256)) * 4
    source = os.path.join(env._dir, "kit-fetch-probe.bin")
    link = os.path.join(env._dir, "kit-fetch-probe.link")
    dest = os.path.join(env._dir, "kit-fetch-probe.copy")
    with open(source, "wb") as fh:
        fh.write(data)
    os.symlink(source, link)
    env.fetch_file(source, dest, max_bytes=len(data))
    with open(dest, "rb") as fh:
        copied = fh.read()
    return copied == data and str(env.fetch_realpath(link)) == source


def _heredoc(env: Any) -> bool:
    env._stdin_mode = "heredoc"
    try:
        return _output(env, "cat", stdin_data="via heredoc").strip() == "via heredoc"
    finally:
        env._stdin_mode = "pipe"


def _sudo(env: Any) -> bool:
    saved = os.environ.get("SUDO_PASSWORD")
    os.environ["SUDO_PASSWORD"] = "kit-probe"
    try:
        out = _output(env, "function sudo { printf '%s|' \"$@\"; head -n1; }; sudo true")
    finally:
        if saved is None:
            os.environ.pop("SUDO_PASSWORD", None)
        else:
            os.environ["SUDO_PASSWORD"] = saved
    return out.strip() == "-S|-p||true|kit-probe"


def _yield_handler(env: Any) -> bool:
    """BaseEnvironment.execute takes yield_handler (None runs the command as usual)."""
    return _output(env, "echo yielded", yield_handler=None).strip() == "yielded"


def _stdin_error(env: Any) -> bool:
    """A stdin error left on the process handle comes back as stdin_error and an output note."""
    result = _run(env, "cat > /dev/null; echo after", stdin_data="kit\ud800probe")
    return bool(result.get("stdin_error")) and "[stdin write failed:" in str(result.get("output", ""))


def _wait_loop(env: Any) -> bool:
    return callable(getattr(env, "_wait_for_process", None))


def _sync_back_guard(env: Any) -> bool:
    """The host's FileSyncManager refuses to sync a changed skill back into HERMES_HOME/skills/."""
    import tarfile
    from pathlib import Path

    file_sync = importlib.import_module("tools.environments.file_sync")
    home = Path(env._dir, "kit-guard-home")
    skill = home / "skills" / "kit-probe" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("pushed\n")
    remote = "/kit-remote/.hermes/skills/kit-probe/SKILL.md"
    changed = Path(env._dir, "kit-guard-changed")
    changed.write_text("changed in the sandbox\n")

    def download(dest: Path) -> None:
        with tarfile.open(dest, "w") as tar:
            tar.add(changed, arcname=remote.lstrip("/"))

    manager = file_sync.FileSyncManager(
        get_files_fn=lambda: [(str(skill), remote)],
        upload_fn=lambda host, rem: None,
        delete_fn=lambda paths: None,
        bulk_download_fn=download,
    )
    saved = os.environ.get("HERMES_HOME")
    os.environ["HERMES_HOME"] = str(home)  # current hosts judge the target against get_hermes_home()
    log = logging.getLogger("tools.environments.file_sync")
    was_disabled, log.disabled = log.disabled, True  # a refusal is the expected outcome, not news
    loaded = {
        name: (module, dict(vars(module)))
        for name, module in list(sys.modules.items())
        if name.startswith("tools.") and module is not None
    }
    try:
        manager.sync(force=True)
        manager.sync_back(hermes_home=home)
    finally:
        log.disabled = was_disabled
        if saved is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = saved
        _forget_probe_home(loaded, keep=file_sync.__name__)
    return skill.read_text() == "pushed\n"


def _forget_probe_home(loaded: dict[str, tuple[Any, dict[str, Any]]], keep: str) -> None:
    """Undo what the sync probe left in the host's modules: hermes-agent 0.19.0 caches the
    credential files it read from config.yaml, which was then the probe's empty home.  Modules
    the probe imported are dropped (the next import starts clean); the others get their globals back."""
    for name in [n for n in list(sys.modules) if n.startswith("tools.") and n not in loaded and n != keep]:
        sys.modules.pop(name, None)
    for module, before in loaded.values():
        for key, value in before.items():
            if module.__dict__.get(key, _MISSING) is not value:
                module.__dict__[key] = value


def _provider_config() -> bool:
    base = importlib.import_module("agent.terminal_env_provider").TerminalEnvironmentProvider
    methods = ("get_config_schema", "resolve_config", "probe_with_config")
    return all(callable(getattr(base, name, None)) for name in methods)


def _workspace_binding_class() -> bool:
    return isinstance(getattr(importlib.import_module("agent.terminal_env_provider"), "WorkspaceBinding", None), type)


def _plugin_load_deadline() -> bool:
    """An installed Hermes bounds plugin loads where its loader says so (read from source); the builtin
    host follows the releases that do."""
    from conformance.host import abi

    active = abi.active()
    if active is None or active.mode != "hermes":
        return True
    spec = importlib.util.find_spec("hermes_cli.plugins_loader")
    if spec is None or not spec.origin:
        return False
    with open(spec.origin, encoding="utf-8", errors="replace") as source:
        return "load_timeout_seconds" in source.read()


# What the host hands a provider, read from its provider ABI and plugin loader (nothing runs).
ABI_PROBES: dict[str, Callable[[], bool]] = {
    "provider-config": _provider_config,
    "workspace-binding-class": _workspace_binding_class,
    "plugin-load-deadline": _plugin_load_deadline,
}

PROBES: dict[str, ProbeFn] = {
    "wait-loop": _wait_loop,
    "session-snapshot": _snapshot,
    "snapshot-redumps-functions": _functions_redumped,
    "exec-worker-thread": _worker_thread,
    "cwd-marker": _cwd_marker,
    "cwd-observed": _cwd_observed,
    "snapshot-excludes-session-vars": _excludes_session_vars,
    "fetch-file": _fetch,
    "recreated-flag": _recreated,
    "bounded-capture": _bounded,
    "heredoc-stdin": _heredoc,
    "sudo-rewrite": _sudo,
    "stdin-error": _stdin_error,
    "yield-handler": _yield_handler,
    "sync-back-guard": _sync_back_guard,
}


def detect(base_cls: type | None = None) -> dict[str, bool]:
    """Probe every feature on the active host (or on ``base_cls``); a probe that raises means absent."""
    if base_cls is None:
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
    for name, abi_probe in ABI_PROBES.items():
        try:
            found[name] = bool(abi_probe())
        except Exception:
            found[name] = False
    return found

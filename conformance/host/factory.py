"""Build environments exactly as Hermes's _build_plugin_env does.

The provider gets exactly ``cwd, timeout, task_id, image="", container_config``
(an empty dict unless the provider is a container backend); the host then
stamps ``_hermes_backend_name`` and ``env_type``, swallowing failures.

The kit waits ``deadline`` seconds for the provider's create_environment()
(it runs on its own thread, with the caller's context variables, so a secret
scope set by the caller is seen); a backend that never returns fails the
check with a message naming the call and the deadline instead of hanging.
"""

from __future__ import annotations

import ast
import contextvars
import copy
import functools
import importlib.util
from pathlib import Path
from typing import Any

from conformance.host.calls import bounded

# Every task-id shape a real host produces (tools/terminal_tool.py::_resolve_container_task_id).
TASK_ID_SHAPES = (
    "default",
    "session:kit-7f3a9c",
    "profile:work:20261129_074455_ab12cd",
    "home:/home/alice/.hermes-work:sess-42",
    "prompt-backend-probe",
    "host-local-4f1c2e",
    "rollout/batch 3:item/7",
)

# Every key (and default) of the container_config the host sends a container backend
# (tools/terminal_tool_backends.py _CONTAINER_KEYS, shaped by _container_config_from_config).
CONTAINER_DEFAULTS: dict[str, Any] = {
    "container_cpu": 1,
    "container_memory": 5120,
    "container_disk": 51200,
    "container_persistent": True,
    "modal_mode": "auto",
    "vercel_runtime": "",
    "docker_volumes": [],
    "docker_mount_cwd_to_workspace": False,
    "docker_forward_env": [],
    "docker_env": {},
    "docker_run_as_host_user": False,
    "docker_extra_args": [],
    "docker_shm_size": "1g",
    "docker_network": True,
    "docker_persist_across_processes": True,
    "docker_shared_container_key": "",
    "docker_orphan_reaper": True,
    "docker_snap_compat": False,
}
DEFAULT_TIMEOUT = 180
HERMES_DEFAULT_CWD = "/root"
CREATE_DEADLINE_S = 60.0  # as long as doctor waits for a create; a slower create is a broken one


def host_container_defaults() -> dict[str, Any]:
    """The container_config keys and defaults of the host's own factory: an installed Hermes's
    ``_CONTAINER_KEYS`` (tools/terminal_tool_backends.py, read from its source, nothing imported) where
    it has one, else the 0.21 keys above (the builtin host, and Hermes before the provider ABI)."""
    from conformance.host import abi

    active = abi.active()
    return _installed_container_keys() if active is not None and active.mode == "hermes" else CONTAINER_DEFAULTS


@functools.cache
def _installed_container_keys() -> dict[str, Any]:
    try:
        spec = importlib.util.find_spec("tools.terminal_tool_backends")
        source = Path(spec.origin).read_bytes() if spec is not None and spec.origin else b""
    except (ImportError, ValueError, OSError):
        source = b""
    for node in ast.parse(source).body if source else ():
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_CONTAINER_KEYS" for t in node.targets):
            try:
                return {str(key): default for key, default in ast.literal_eval(node.value)}
            except (ValueError, TypeError):
                break
    return CONTAINER_DEFAULTS


def container_config_for(provider: Any, terminal_config: dict[str, Any]) -> dict[str, Any]:
    """What the host's factory passes a provider as container_config: every key with the configured
    value or its default for a container backend, nothing for another."""
    if not getattr(provider, "is_container", True):
        return {}
    defaults = host_container_defaults()
    config = copy.deepcopy(defaults)  # a provider that edits a list must not change the defaults
    for key in defaults:
        if key in terminal_config:
            config[key] = terminal_config[key]
    return config


def configured_cwd(provider: Any, terminal_config: dict[str, Any]) -> str | None:
    """terminal.cwd, else the provider's default_cwd extension, else None."""
    configured = terminal_config.get("cwd")
    if configured:
        return str(configured)
    try:
        extension = getattr(provider, "default_cwd", None)
    except Exception:
        extension = None
    return extension if isinstance(extension, str) and extension else None


def default_cwd(provider: Any, terminal_config: dict[str, Any]) -> str:
    """terminal.cwd, else the provider's default_cwd extension, else Hermes's /root."""
    return configured_cwd(provider, terminal_config) or HERMES_DEFAULT_CWD


def create_environment(
    provider: Any,
    terminal_config: dict[str, Any],
    *,
    task_id: str = "default",
    cwd: str | None = None,
    timeout: int | None = None,
    container_config: dict[str, Any] | None = None,
    persistent: bool | None = None,
    extra_kwargs: dict[str, Any] | None = None,
    deadline: float = CREATE_DEADLINE_S,
) -> Any:
    cc = container_config if container_config is not None else container_config_for(provider, terminal_config)
    if persistent is not None and getattr(provider, "is_container", True):
        cc = {**cc, "container_persistent": persistent}
    kwargs: dict[str, Any] = {
        "cwd": cwd if cwd is not None else default_cwd(provider, terminal_config),
        "timeout": timeout if timeout is not None else int(terminal_config.get("timeout", DEFAULT_TIMEOUT)),
        "task_id": task_id,
        "image": "",
        "container_config": cc,
    }
    kwargs.update(extra_kwargs or {})
    context = contextvars.copy_context()
    env = bounded(
        lambda: context.run(provider.create_environment, **kwargs),
        deadline=deadline,
        what=f"create_environment(task_id={task_id!r})",
    )
    stamp(env, provider)
    return env


def stamp(env: Any, provider: Any) -> None:
    try:
        env._hermes_backend_name = provider.name.strip().lower()
    except AttributeError:
        pass
    try:
        env.env_type = provider.name.strip().lower()
    except Exception:
        pass

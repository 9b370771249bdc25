"""The --backend-config file: how a run configures the backend under test.

    terminal:            # merged into Hermes's terminal config (config.yaml terminal:)
      cwd: /workspace
      container_persistent: true
      upstash_box_size: small
    env:                 # variables exported for the run (e.g. a live endpoint)
      UPSTASH_BOX_BASE_URL: https://example.invalid
    capabilities:        # optional capabilities the backend claims, replacing
      - persistence      # what the provider or plugin.yaml declares (and disclaims)
      - stdin-stream
    disclaims:           # optional capabilities the backend does not offer, although
      - file-sync        # its code may look as if it did (no probe is run for them)
    persistent_path: /workspace   # the directory a persistent sandbox keeps across cleanup
                                  # (conformance.persistent_path; default: the environment's cwd)
    kind: host-attached  # sandbox (a sandbox per task) or host-attached (commands share one machine);
                         # disclaiming per-task-sandbox says host-attached too
    settings:            # the plugin's own settings (config.yaml plugins.entries.<name>.settings),
      region: eu-1       # what the plugin reads with ctx.get_config("region", default)

The kind given here wins over plugin.yaml's ``conformance.kind``, the provider's
``conformance_backend_kind`` and what the kit infers (capabilities.py).

Values of ``env`` and of ``terminal`` may be written ``${NAME}`` to take
them from the caller's environment, so secrets never need to be written into
the file, or from the run's own variables: with
``--client-faults=tcp:HOST:PORT``, ``${HERMES_KIT_TCP_PROXY}`` (``_HOST``,
``_PORT``) is its TCP fault proxy (``terminal: {ssh_port:
${HERMES_KIT_TCP_PROXY_PORT}}`` points Hermes's SSH backend at it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance import persistent_path
from conformance.errors import BackendConfigError, file_problem, yaml_problem
from conformance.fault_routes import TCP_PROXY_VARS

_ALLOWED = {"terminal", "env", "capabilities", "disclaims", "persistent_path", "kind", "settings"}
KINDS = ("sandbox", "host-attached")  # the backend kinds (capabilities.BACKEND_KINDS)
# Disclaiming this capability (which follows the kind, never declared) is another way to say host-attached.
PER_TASK_SANDBOX = "per-task-sandbox"
_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# Variables the run itself sets, and how to make it.
_RUN_VARIABLES = {
    name: "the run sets it to its TCP fault proxy's address when given --client-faults=tcp:HOST:PORT "
    "(docs/transport-faults.md); give that option"
    for name in TCP_PROXY_VARS
}


@dataclass
class BackendConfig:
    terminal: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    capabilities: list[str] | None = None
    disclaims: list[str] | None = None
    path: str | None = None
    persistent_path: str | None = None
    kind: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def load(path: str | None, known_capabilities: set[str], *, run_sets: Collection[str] = ()) -> BackendConfig:
    """The config at ``path``; ``run_sets``: variables the run will export itself (an ``env`` value naming
    one that is unset yet is read as empty, for a check of the file before the run)."""
    if not path:
        return BackendConfig()
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise BackendConfigError(
            f"--backend-config {p}: cannot read it ({file_problem(exc)})", "pass the path of a readable YAML file"
        ) from None
    except yaml.YAMLError as exc:
        raise BackendConfigError(
            f"--backend-config {p}: not valid YAML ({yaml_problem(exc)})", "fix the YAML syntax at that line"
        ) from None
    data = data or {}
    if not isinstance(data, dict):
        raise BackendConfigError(
            f"--backend-config {p}: the top level is a {type(data).__name__}, not a mapping",
            f"write a mapping with some of the keys {', '.join(sorted(_ALLOWED))}",
        )
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise BackendConfigError(
            f"--backend-config {p}: unknown key(s) {', '.join(unknown)}", f"use only {', '.join(sorted(_ALLOWED))}"
        )
    terminal = data.get("terminal") or {}
    if not isinstance(terminal, dict):
        raise BackendConfigError(
            f"--backend-config {p}: terminal is a {type(terminal).__name__}",
            "make terminal a mapping of Hermes terminal config keys (cwd: /workspace, ...)",
        )
    env_raw = data.get("env") or {}
    if not isinstance(env_raw, dict):
        raise BackendConfigError(
            f"--backend-config {p}: env must be a mapping of variable names to strings",
            "write env as NAME: value lines (value may be ${NAME} to take it from yours)",
        )
    env = {str(name): _resolved(p, f"env.{name}", str(value), run_sets) for name, value in env_raw.items()}
    terminal = {
        key: _resolved(p, f"terminal.{key}", value, run_sets) if isinstance(value, str) else value
        for key, value in terminal.items()
    }
    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise BackendConfigError(
            f"--backend-config {p}: settings is a {type(settings).__name__}",
            "make settings a mapping of the plugin's own settings (label: eu boxes, ...), as under "
            "plugins.entries.<name>.settings in Hermes's config.yaml",
        )
    kind = _kind(p, data)
    caps = _capability_list(p, data, "capabilities", known_capabilities)
    disclaims = _capability_list(p, data, "disclaims", known_capabilities | {PER_TASK_SANDBOX})
    if disclaims is not None and PER_TASK_SANDBOX in disclaims:
        if kind == "sandbox":
            raise BackendConfigError(
                f"--backend-config {p}: kind sandbox, yet {PER_TASK_SANDBOX} disclaimed",
                "a sandbox backend has a sandbox per task: drop one of the two",
            )
        kind = "host-attached"
        disclaims = [c for c in disclaims if c != PER_TASK_SANDBOX]
    both = sorted(set(caps or ()) & set(disclaims or ()))
    if both:
        raise BackendConfigError(
            f"--backend-config {p}: {', '.join(both)} both declared (capabilities) and disclaimed (disclaims)",
            "keep each capability in one list",
        )
    persistent = data.get("persistent_path")
    if persistent is not None:
        try:
            persistent_path.checked(persistent, f"--backend-config {p} persistent_path")
        except persistent_path.PersistentPathError as exc:
            raise BackendConfigError(exc.what, exc.fix) from None
    return BackendConfig(
        terminal=terminal,
        env=env,
        capabilities=caps,
        disclaims=disclaims,
        path=str(p),
        persistent_path=persistent,
        kind=kind,
        settings=settings,
    )


def _resolved(p: Path, where: str, value: str, run_sets: Collection[str]) -> str:
    """``value``, or the variable it names when written ``${NAME}``."""
    ref = _REF.match(value)
    if not ref:
        return value
    if ref.group(1) not in os.environ and ref.group(1) not in run_sets:
        raise BackendConfigError(
            f"--backend-config {p}: {where} refers to ${{{ref.group(1)}}}, which is not set",
            _RUN_VARIABLES.get(ref.group(1), f"export {ref.group(1)} before the run"),
        )
    return os.environ.get(ref.group(1), "")


def _kind(p: Path, data: dict[str, Any]) -> str | None:
    kind = data.get("kind")
    if kind is None or kind in KINDS:
        return kind
    raise BackendConfigError(
        f"--backend-config {p}: kind is {kind!r}, not a backend kind",
        f"write kind: {' or kind: '.join(KINDS)} (host-attached: every task's commands run on one machine)",
    )


def _capability_list(p: Path, data: dict[str, Any], key: str, known: set[str]) -> list[str] | None:
    caps = data.get(key)
    if caps is None:
        return None
    if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
        raise BackendConfigError(
            f"--backend-config {p}: {key} must be a list of names",
            f"write {key} as a YAML list, e.g. [persistence, stdin-stream]",
        )
    bad = sorted(set(caps) - known)
    if bad:
        raise BackendConfigError(
            f"--backend-config {p}: unknown capability {', '.join(bad)} in {key}",
            f"use declarable ones: {', '.join(sorted(known))}",
        )
    return caps

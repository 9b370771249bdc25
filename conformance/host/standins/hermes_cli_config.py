"""Stand-in for ``hermes_cli.config``: the Hermes home's ``config.yaml`` and ``.env``, read as Hermes reads them.

Terminal backends read their own settings here, usually the ``terminal.<backend>``
section: ``cfg_get(load_config(), "terminal", "acme_box", "region")``.  The
behaviour follows Hermes 0.21 (docs/host-surface.md lists the sources):

- ``get_config_path()`` / ``get_env_path()``: ``config.yaml`` / ``.env`` under the
  Hermes home (``hermes_constants.get_hermes_home()``, so ``HERMES_HOME``).
- ``load_config()``: ``DEFAULT_CONFIG`` deep-merged with ``config.yaml`` (a section
  the file leaves empty keeps its defaults), ``${VAR}`` and ``${env:VAR}`` in string
  values expanded (an unset one stays as written).  A file that is not valid YAML
  or not a mapping is reported on stderr and in the log, naming the file, the line
  and the fix; the process then keeps the last configuration it loaded from that
  file, or the defaults.  Hermes never lets a broken file stop a running agent.
- ``read_raw_config()``: the file as written, ``{}`` when missing or broken
  (reported as above).
- ``read_user_config_raw()``: the file as written with no fallback: invalid YAML
  raises the parser's error.
- ``require_parseable_user_config()``: raises ``InvalidUserConfigError`` naming the
  file, the problem and the fix, as Hermes does before a non-interactive run.
- ``cfg_get(cfg, *keys, default=None)``: a nested lookup that never raises; an
  explicit ``None`` is returned as ``None``.
- ``get_env_value(name)``: the process environment (through the secret scope),
  else the Hermes home's ``.env``.
- ``fast_safe_load(stream)``: YAML's safe loader; Hermes imports it into this module
  from its ``utils`` and plugins read their own YAML with it from here.

``DEFAULT_CONFIG`` holds the ``terminal`` section only: the keys a terminal
backend may read, with Hermes's defaults.  Nothing here writes to the Hermes
home; saving configuration is the Hermes CLI's job, not a backend's.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from conformance.errors import file_problem, yaml_problem
from conformance.host.factory import CONTAINER_DEFAULTS, DEFAULT_TIMEOUT
from conformance.host.standins import hermes_constants as _kit_constants

__all__ = [
    "DEFAULT_CONFIG",
    "InvalidUserConfigError",
    "cfg_get",
    "fast_safe_load",
    "get_config_path",
    "get_env_path",
    "get_env_value",
    "get_hermes_home",
    "load_config",
    "load_config_readonly",
    "load_env",
    "read_raw_config",
    "read_raw_config_readonly",
    "read_user_config_raw",
    "require_parseable_user_config",
]

logger = logging.getLogger("hermes_cli.config")


class InvalidUserConfigError(RuntimeError):
    """config.yaml exists but cannot be used (not YAML, or not a mapping)."""


# Hermes's defaults for the terminal section: the keys the host turns into a backend's
# container_config, the command timeout and the backend name.
DEFAULT_CONFIG: dict[str, Any] = {
    "terminal": {"backend": "local", "timeout": DEFAULT_TIMEOUT, **copy.deepcopy(CONTAINER_DEFAULTS)}
}

_FIX = "edit it into a YAML mapping of sections such as terminal:, starting at the line named"
_LOCK = threading.RLock()
_LAST_GOOD: dict[str, dict[str, Any]] = {}  # config path -> the last configuration loaded from it
_REPORTED: set[tuple[str, int, int]] = set()  # (path, mtime_ns, size) of broken files already reported
_ENV_REF = re.compile(r"\$\{([^}]+)\}")
_SOURCE_REF = re.compile(r"^[a-z][a-z0-9_-]*:")


def get_hermes_home() -> Path:
    """The running host's Hermes home (its own ``hermes_constants`` when it has one)."""
    try:
        from hermes_constants import get_hermes_home as host_home

        return Path(host_home())
    except ImportError:
        return _kit_constants.get_hermes_home()


def get_config_path() -> Path:
    return get_hermes_home() / "config.yaml"


def get_env_path() -> Path:
    return get_hermes_home() / ".env"


def fast_safe_load(stream: Any) -> Any:
    """Parse YAML from a string or a file object with the safe loader (libyaml's where PyYAML has it)."""
    return yaml.load(stream, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def cfg_get(cfg: Any, *keys: str, default: Any = None) -> Any:
    """``cfg[k1][k2]...``, or ``default`` as soon as a key is missing or a level is not a mapping."""
    node = cfg
    if not isinstance(node, dict):
        return default
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


class _Unusable(Exception):
    """config.yaml exists but is not a YAML mapping; ``problem`` says why in one line."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _parse(path: Path) -> dict[str, Any] | None:
    """The file's mapping (``{}`` when empty), None when there is no file; _Unusable when broken."""
    try:
        text = path.read_text("utf-8-sig")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise _Unusable(f"cannot read it ({file_problem(exc)})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _Unusable(f"not valid YAML ({yaml_problem(exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _Unusable(f"the top level is a {type(data).__name__}, not a mapping")
    return data


def _report_broken(path: Path, problem: str, fallback: str) -> None:
    """Say once per version of the file that it is unusable and what the process uses instead."""
    try:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        key = (str(path), 0, 0)
    with _LOCK:
        if key in _REPORTED:
            return
        _REPORTED.add(key)
    message = f"hermes config: {path} is unusable: {problem}; {fallback} until it is fixed: {_FIX}"
    logger.warning(message)
    try:
        sys.stderr.write(message + "\n")
    except Exception:
        pass


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``; mappings merge key by key, and an empty (None) section keeps the default."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = _deep_merge(merged[key], value)
        elif not (isinstance(merged.get(key), dict) and value is None):
            merged[key] = value
    return merged


def _lookup(name: str) -> str | None:
    """A referenced variable, through the secret scope when one is installed (as Hermes reads it)."""
    try:
        from agent.secret_scope import current_secret_scope, get_secret
    except Exception:
        return os.environ.get(name)
    if current_secret_scope() is None:
        return os.environ.get(name)
    value = get_secret(name)
    return value if isinstance(value, str) else None


def _expand_one(match: re.Match[str]) -> str:
    inner = match.group(1).strip()
    if inner.startswith("env:"):
        name = inner[len("env:") :].strip()
    elif _SOURCE_REF.match(inner):
        return match.group(0)  # another secret source (vault:..., file:...): resolved elsewhere, kept as written
    else:
        name = inner
    value = _lookup(name) if name else None
    return match.group(0) if value is None else value


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        return _ENV_REF.sub(_expand_one, value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def load_config() -> dict[str, Any]:
    """The effective configuration (a fresh copy the caller may change)."""
    path = get_config_path()
    try:
        user = _parse(path)
    except _Unusable as exc:
        with _LOCK:
            last = _LAST_GOOD.get(str(path))
        _report_broken(
            path,
            exc.problem,
            "using the configuration loaded before it broke" if last is not None else "using the default configuration",
        )
        return copy.deepcopy(last if last is not None else DEFAULT_CONFIG)
    merged: dict[str, Any] = _expand(_deep_merge(copy.deepcopy(DEFAULT_CONFIG), user or {}))
    if user is not None:
        with _LOCK:
            _LAST_GOOD[str(path)] = copy.deepcopy(merged)
    return merged


def load_config_readonly() -> dict[str, Any]:
    """``load_config()`` for callers that only read (Hermes skips a copy here; this stand-in always copies)."""
    return load_config()


def read_raw_config() -> dict[str, Any]:
    """config.yaml exactly as written (no defaults, no expansion); ``{}`` when missing or unusable."""
    path = get_config_path()
    try:
        return _parse(path) or {}
    except _Unusable as exc:
        _report_broken(path, exc.problem, "reading it as empty")
        return {}


def read_raw_config_readonly() -> dict[str, Any]:
    return read_raw_config()


def read_user_config_raw(config_path: Path | None = None) -> dict[str, Any]:
    """A config.yaml exactly as written, with no fallback: invalid YAML raises the parser's error."""
    path = Path(config_path) if config_path is not None else get_config_path()
    try:
        text = path.read_text("utf-8-sig")
    except FileNotFoundError:
        return {}
    data = yaml.safe_load(text)
    return data if isinstance(data, dict) else {}


def require_parseable_user_config(*, ignore_user_config: bool = False) -> None:
    """Raise InvalidUserConfigError when config.yaml exists and is not a YAML mapping."""
    if ignore_user_config or os.environ.get("HERMES_IGNORE_USER_CONFIG") == "1":
        return
    path = get_config_path()
    try:
        _parse(path)
    except _Unusable as exc:
        raise InvalidUserConfigError(
            f"{path} is unusable: {exc.problem}; {_FIX}, or set HERMES_IGNORE_USER_CONFIG=1 to run with the defaults"
        ) from None


def load_env() -> dict[str, str]:
    """The Hermes home's ``.env`` as a mapping (``{}`` when there is none)."""
    try:
        text = get_env_path().read_text("utf-8-sig", errors="replace")
    except OSError:
        return {}
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            continue
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].rstrip()
        values[name] = value
    return values


def get_env_value(key: str) -> str | None:
    """``key`` from the process environment (through the secret scope), else from the Hermes home's ``.env``."""
    try:
        from agent.secret_scope import get_secret

        value = get_secret(key)
    except ImportError:
        value = os.environ.get(key)
    return load_env().get(key) if value is None else value

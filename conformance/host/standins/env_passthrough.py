"""Stand-in for ``tools.env_passthrough``: which host variables may enter a sandbox.

Two sources allow a name: a skill's ``required_environment_variables``
(``register_env_passthrough``, kept per context so sessions never see each
other's) and ``terminal.env_passthrough`` in ``$HERMES_HOME/config.yaml``
(re-read when the file changes).  Hermes's own model-provider credentials are
refused from both.  Under profile multiplexing a value is resolved through the
active profile's secret scope, never from os.environ.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from contextvars import ContextVar
from pathlib import Path

import yaml

logger = logging.getLogger("tools.env_passthrough")

_allowed: ContextVar[set[str]] = ContextVar("hermes_env_passthrough")
_config_cache: dict[str, tuple[tuple[int, int] | None, frozenset[str]]] = {}

# Credentials of the model providers Hermes itself talks to: no skill or config may forward them.
PROVIDER_CREDENTIALS = frozenset(
    {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_TOKEN",
        "OPENROUTER_API_KEY",
        "NOUS_API_KEY",
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "MISTRAL_API_KEY",
        "GROQ_API_KEY",
        "DEEPSEEK_API_KEY",
        "XAI_API_KEY",
        "TOGETHER_API_KEY",
        "FIREWORKS_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "HF_TOKEN",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
        "DAYTONA_API_KEY",
        "VERCEL_TOKEN",
    }
)
# Secrets Hermes injects under generated names (side-model keys, gateway relay auth).
_INTERNAL_SECRET = re.compile(r"^(AUXILIARY_[A-Z0-9_]+_(API_KEY|BASE_URL)|GATEWAY_RELAY_[A-Z0-9_]*(SECRET|KEY|TOKEN))$")


def is_hermes_provider_credential(name: str) -> bool:
    upper = name.upper()
    return upper in PROVIDER_CREDENTIALS or bool(_INTERNAL_SECRET.match(upper))


def _current() -> set[str]:
    try:
        return _allowed.get()
    except LookupError:
        names: set[str] = set()
        _allowed.set(names)
        return names


def _accept(names: Iterable[str], source: str) -> Iterable[str]:
    for raw in names:
        name = raw.strip() if isinstance(raw, str) else ""
        if not name:
            continue
        if is_hermes_provider_credential(name):
            logger.warning("env passthrough: %s may not forward Hermes provider credential %r", source, name)
            continue
        yield name


def register_env_passthrough(var_names: Iterable[str]) -> None:
    """Allow a skill's required variables into sandboxes for this session."""
    _current().update(_accept(var_names, "a skill"))


def _config_path() -> Path:
    from hermes_constants import get_hermes_home

    return Path(get_hermes_home()) / "config.yaml"


def _config_names() -> frozenset[str]:
    path = _config_path()
    try:
        st = path.stat()
        signature: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
    except OSError:
        signature = None
    cached = _config_cache.get(str(path))
    if cached is not None and cached[0] == signature:
        return cached[1]
    names: frozenset[str] = frozenset()
    if signature is not None:
        try:
            data = yaml.safe_load(path.read_text("utf-8")) or {}
            terminal = data.get("terminal") if isinstance(data, dict) else None
            listed = terminal.get("env_passthrough") if isinstance(terminal, dict) else None
            if isinstance(listed, list):
                names = frozenset(_accept(listed, "config.yaml"))
        except (OSError, yaml.YAMLError) as exc:
            logger.debug("cannot read terminal.env_passthrough from %s: %s", path, exc)
    _config_cache[str(path)] = (signature, names)
    return names


def is_env_passthrough(var_name: str) -> bool:
    return var_name in get_all_passthrough()


def get_all_passthrough() -> frozenset[str]:
    return frozenset(n for n in _current() | _config_names() if not is_hermes_provider_credential(n))


def resolve_passthrough_value(name: str, fallback: str | None = None) -> str | None:
    """The value to forward for ``name``; ``fallback`` is what the process environment gave.

    Multiplexing: the active scope decides (a name it lacks is None; no scope raises
    UnscopedSecretError).  Otherwise a scope overlays the fallback.
    """
    from agent.secret_scope import current_secret_scope, get_secret, is_multiplex_active

    scope_module = __import__("agent.secret_scope", fromlist=["_is_global_env"])
    is_global = getattr(scope_module, "_is_global_env", None)
    if fallback is not None and callable(is_global) and is_global(name):
        return fallback
    multiplexed = is_multiplex_active()
    if current_secret_scope() is None:
        return get_secret(name) if multiplexed else fallback
    return get_secret(name, None if multiplexed else fallback)


def clear_env_passthrough() -> None:
    """Forget the skill-registered names of this session."""
    _current().clear()

"""The one exception a reference backend raises to Hermes for infrastructure trouble."""

from __future__ import annotations

from reference.common.redact import redact


def connection_error(message: str, exc: BaseException | None = None, *, secrets: tuple[str | None, ...] = (),
                     hint: str) -> Exception:
    """EnvironmentConnectionError when the host has it (shown as degraded), else RuntimeError; text redacted."""
    from tools.environments import base

    text = redact(f"{message}: {exc}" if exc is not None else message, secrets)
    cls = getattr(base, "EnvironmentConnectionError", RuntimeError)
    try:
        return cls(text, retry_hint=hint)
    except TypeError:  # hosts whose exception takes no retry hint
        return cls(text)

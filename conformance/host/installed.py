"""What every machine running a plugin under the kit has, whatever the plugin installs.

A plugin's vendor SDK is what a user may lack; the distributions hermes-agent
itself depends on are on every Hermes machine (hermes-agent 0.19.0's
``Requires-Dist``, platform-independent entries), and the distributions the kit
needs to run at all cannot be taken away by the kit without breaking itself.
Neither is ever hidden as "the SDK" of ``provider.unconfigured``.
"""

from __future__ import annotations

import importlib.metadata
import re

HERMES_REQUIRES = frozenset(
    {
        "openai", "certifi", "python-dotenv", "fire", "httpx", "rich", "tenacity", "pyyaml",
        "ruamel-yaml", "requests", "jinja2", "pydantic", "prompt-toolkit", "croniter", "packaging",
        "markdown", "pyjwt", "urllib3", "cryptography", "psutil", "websockets", "pathspec",
        "fastapi", "uvicorn", "python-multipart", "ptyprocess", "pillow",
    }
)  # fmt: skip
KIT = "hermes-backend-kit"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def normal(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def kit_requires() -> frozenset[str]:
    """The kit's own distribution and the ones it requires to run (no extras)."""
    try:
        requires = importlib.metadata.requires(KIT) or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    names = {normal(m.group(0)) for r in requires if "extra ==" not in r for m in [_NAME.match(r)] if m}
    return frozenset({KIT, *names})


def always_present(distributions: list[str]) -> bool:
    """Whether a module of ``distributions`` is on every machine a run can happen on."""
    present = HERMES_REQUIRES | kit_requires()
    return any(normal(d) in present for d in distributions)

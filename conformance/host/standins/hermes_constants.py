"""Stand-in for ``hermes_constants``: where Hermes keeps its home and the files in it.

As in Hermes 0.21: the home is ``HERMES_HOME``, else ``~/.hermes``; the root is the
directory above every profile (``<root>/profiles/<name>`` is a named profile's home,
any other home is its own root); ``config.yaml``, ``.env`` and ``skills/`` live in
the home; ``hermes_home_key`` names a home the same way however its path is spelled.
"""

from __future__ import annotations

import os
from pathlib import Path


def _platform_default_home() -> Path:
    return Path.home() / ".hermes"


def get_process_hermes_home() -> Path:
    value = os.environ.get("HERMES_HOME", "").strip()
    return Path(value) if value else _platform_default_home()


def get_hermes_home() -> Path:
    return get_process_hermes_home()


def get_default_hermes_root() -> Path:
    """The directory that holds every profile of this installation."""
    native = _platform_default_home()
    configured = os.environ.get("HERMES_HOME", "").strip()
    if not configured:
        return native
    home = Path(configured)
    try:
        home.resolve().relative_to(native.resolve())
        return native  # ~/.hermes itself or one of its profiles
    except ValueError:
        return home.parent.parent if home.parent.name == "profiles" else home


def hermes_home_key(path: str | Path | None = None) -> str:
    """One key per Hermes home (or profile) directory, however it is spelled: the directory resolved
    (leniently when it does not exist yet), case-normalised where the platform ignores case."""
    home = Path(path) if path is not None else get_hermes_home()
    return os.path.normcase(str(home.expanduser().resolve(strict=False)))


def get_config_path() -> Path:
    return get_hermes_home() / "config.yaml"


def get_env_path() -> Path:
    return get_hermes_home() / ".env"


def get_skills_dir() -> Path:
    return get_hermes_home() / "skills"


def display_hermes_home() -> str:
    """The home as a user would type it: ``~/...`` when under the user's home directory."""
    home = get_hermes_home()
    try:
        return "~/" + home.relative_to(Path.home()).as_posix()
    except ValueError:
        return str(home)

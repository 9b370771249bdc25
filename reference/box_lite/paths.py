"""Where Box Lite keeps its files: one ``BoxHome`` resolved once per command.

The home is chosen by, in order: ``--home DIR`` (everything under DIR), the
``HERMES_BOX_HOME`` variable (the same), or the user's XDG directories
through platformdirs (``~/.config/hermes-box``, ``~/.local/share/hermes-box``
and ``$XDG_RUNTIME_DIR/hermes-box``).  Resolving a home creates nothing;
``ensure()`` makes the directories (mode 0700) when a command needs them.

Layout, with a home H (XDG equivalents in the class docstring):

- H/config/box.env, registry.json, runtime-manifest
- H/data/boxes/NAME/{data,tmp,managed,box.json}
- H/backups/
- H/run/NAME/{control.sock,daemon.pid,lock,daemon.log}
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reference.box_lite.errors import BadInput

APP = "hermes-box"
HOME_ENV = "HERMES_BOX_HOME"
# Inside every box: the box user's home (a part of /data) and its workspace.
HOME_INSIDE = "/home/agent"
WORKSPACE_INSIDE = HOME_INSIDE + "/workspace"

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def check_name(name: str) -> str:
    """``name`` if it is a valid box name, else a BadInput saying what a name may be."""
    if NAME_PATTERN.fullmatch(name or ""):
        return name
    shown = repr(name) if len(name or "") <= 80 else repr(name[:80]) + "..."
    raise BadInput(
        f"{shown} is not a valid box name",
        "a name is 1 to 63 characters: lowercase letters, digits and '-', starting with a letter or digit",
        "choose a name such as 'alpha' or 'work-2'",
    )


@dataclass(frozen=True)
class BoxHome:
    """The four directories Box Lite uses, and the paths inside them.

    With XDG (no home given): config_dir = $XDG_CONFIG_HOME/hermes-box (~/.config/hermes-box),
    data_dir = $XDG_DATA_HOME/hermes-box (~/.local/share/hermes-box), backups_dir =
    data_dir/backups, runtime_dir = $XDG_RUNTIME_DIR/hermes-box, or data_dir/run without it.
    ``root`` is the relocated home, None for XDG.
    """

    config_dir: Path
    data_dir: Path
    backups_dir: Path
    runtime_dir: Path
    root: Path | None = None

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> BoxHome:
        """Everything under one directory (``--home`` / ``HERMES_BOX_HOME``)."""
        base = Path(root).expanduser().absolute()
        return cls(base / "config", base / "data", base / "backups", base / "run", root=base)

    @classmethod
    def xdg(cls, environ: Mapping[str, str] | None = None) -> BoxHome:
        """The user's XDG directories (platformdirs honours XDG_CONFIG_HOME and XDG_DATA_HOME)."""
        import platformdirs

        env = os.environ if environ is None else environ
        config = Path(platformdirs.user_config_dir(APP, appauthor=False))
        data = Path(platformdirs.user_data_dir(APP, appauthor=False))
        runtime_base = env.get("XDG_RUNTIME_DIR", "").strip()
        runtime = Path(runtime_base) / APP if runtime_base and Path(runtime_base).is_dir() else data / "run"
        return cls(config, data, data / "backups", runtime, root=None)

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> BoxHome:
        """``--home`` if given, else ``HERMES_BOX_HOME`` if set, else XDG."""
        env = os.environ if environ is None else environ
        if home is not None and str(home).strip():
            return cls.at(home)
        from_env = env.get(HOME_ENV, "").strip()
        if from_env:
            return cls.at(from_env)
        return cls.xdg(env)

    def ensure(self) -> BoxHome:
        """Create the home's directories (0700: they hold secrets and sockets); returns self."""
        for path in (self.config_dir, self.data_dir, self.boxes_dir, self.backups_dir, self.runtime_dir):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self

    # Settings, registry and manifest.
    @property
    def settings_file(self) -> Path:
        return self.config_dir / "box.env"

    @property
    def registry_file(self) -> Path:
        return self.config_dir / "registry.json"

    @property
    def registry_lock_file(self) -> Path:
        return self.config_dir / ".registry.lock"

    @property
    def manifest_file(self) -> Path:
        return self.config_dir / "runtime-manifest"

    # One box's persistent directories.
    @property
    def boxes_dir(self) -> Path:
        return self.data_dir / "boxes"

    def box_dir(self, name: str) -> Path:
        return self.boxes_dir / check_name(name)

    def box_data(self, name: str) -> Path:
        """The host directory that is the box's /data."""
        return self.box_dir(name) / "data"

    def box_tmp(self, name: str) -> Path:
        return self.box_dir(name) / "tmp"

    def box_managed(self, name: str) -> Path:
        return self.box_dir(name) / "managed"

    def box_json(self, name: str) -> Path:
        return self.box_dir(name) / "box.json"

    # One box's runtime files.
    def run_dir(self, name: str) -> Path:
        return self.runtime_dir / check_name(name)

    def control_socket(self, name: str) -> Path:
        return self.run_dir(name) / "control.sock"

    def daemon_pid_file(self, name: str) -> Path:
        return self.run_dir(name) / "daemon.pid"

    def lock_file(self, name: str) -> Path:
        return self.run_dir(name) / "lock"

    def daemon_log(self, name: str) -> Path:
        return self.run_dir(name) / "daemon.log"

    def describe(self) -> str:
        """One line for messages: the relocated home, or the XDG config directory."""
        return str(self.root) if self.root is not None else f"{self.config_dir} (XDG)"

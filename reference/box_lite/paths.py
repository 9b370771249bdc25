"""Where Box Lite keeps its files: one ``BoxHome`` resolved once per command.

The home is chosen by, in order: ``--home DIR`` (everything under DIR), the
``HERMES_BOX_HOME`` variable (the same), or the user's XDG directories
through platformdirs (``~/.config/hermes-box``, ``~/.local/share/hermes-box``
and ``$XDG_RUNTIME_DIR/hermes-box``).  Resolving a home creates nothing;
``ensure()`` makes the directories (mode 0700) when a command needs them.

Layout, with a home H (XDG equivalents in the class docstring):

- H/config/box.env, registry.json, runtime-manifest
- H/data/boxes/NAME/{data,tmp,managed,tools,box.json,tools-versions.json}   (``BoxDir``)
- H/data/bases/   (extracted base tarballs, the host base's shared masks)
- H/backups/
- H/run/NAME/{control.sock,daemon.pid,init.pid,lock,daemon.log,provision/STEP.log}   (``RunDir``)

and, inside every box, the paths its directories appear at (``DATA_INSIDE``...).
This module imports only the standard library (platformdirs when XDG is
resolved), so the box daemon can use it and still start quickly.
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

# Inside every box: its durable /data, the box user's home (a part of /data), its workspace, and the
# read-only copy of the settings.
DATA_INSIDE = "/data"
HOME_INSIDE = "/home/agent"
WORKSPACE_INSIDE = HOME_INSIDE + "/workspace"
ENV_FILE_INSIDE = "/etc/hermes-box.env"
# Inside every box, read-only: `hb` and its modules, and the socket `hb` reaches the box's daemon on.
RUN_INSIDE = "/run/hermes-box"
HB_SOCKET_INSIDE = RUN_INSIDE + "/hb.sock"
HB_SOCKET = "hb.sock"
AGENT_ID = 1000  # uid and gid of the box's user ``agent`` inside a box that has a machine (machine.py)
_HOME_IN_DATA = "home"  # /home/agent is this directory of /data

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


def inside(rel: str) -> str:
    """Where the path ``rel`` (relative to a box's /data) is seen inside the box: under /home/agent for
    the box user's home (where it was made, most likely), else under /data."""
    if rel == _HOME_IN_DATA or rel.startswith(_HOME_IN_DATA + "/"):
        return HOME_INSIDE + rel[len(_HOME_IN_DATA) :]
    return f"{DATA_INSIDE}/{rel}" if rel else DATA_INSIDE


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

    # One box's directories.
    @property
    def boxes_dir(self) -> Path:
        return self.data_dir / "boxes"

    def box(self, name: str) -> BoxDir:
        """Box ``name``'s persistent directory (a BadInput for an invalid name)."""
        return BoxDir(self.boxes_dir / check_name(name))

    def run(self, name: str) -> RunDir:
        """Box ``name``'s runtime directory (a BadInput for an invalid name)."""
        return RunDir(self.runtime_dir / check_name(name))

    def describe(self) -> str:
        """One line for messages: the relocated home, or the XDG config directory."""
        return str(self.root) if self.root is not None else f"{self.config_dir} (XDG)"


@dataclass(frozen=True)
class BoxDir:
    """A box's persistent directory, ``data_dir/boxes/NAME``, and what it holds."""

    root: Path

    @property
    def data(self) -> Path:
        """The box's /data (what save archives)."""
        return self.root / "data"

    @property
    def home(self) -> Path:
        """The box user's home, /home/agent inside: a part of /data."""
        return self.data / _HOME_IN_DATA

    @property
    def tmp(self) -> Path:
        """The box's /tmp (and /var/tmp), emptied at each start."""
        return self.root / "tmp"

    @property
    def managed(self) -> Path:
        """Host copies of the managed assets."""
        return self.root / "managed"

    @property
    def env_file(self) -> Path:
        """The host copy of /etc/hermes-box.env."""
        return self.managed / "hermes-box.env"

    @property
    def command_env(self) -> Path:
        """The box user's environment, for the commands its daemon starts itself (the workload)."""
        return self.managed / "command-env.json"

    @property
    def inside(self) -> Path:
        """What the box sees read-only at /run/hermes-box: `hb`, its modules and the daemon's hb.sock."""
        return self.managed / "inside"

    @property
    def tools(self) -> Path:
        """The box's tools layer: what it installed over its base image (machine.py; rebuilt by repair)."""
        return self.root / "tools"

    @property
    def tools_versions(self) -> Path:
        """JSON ``{tool: version}`` of what provisioning installed in the tools layer (``hb versions``)."""
        return self.root / "tools-versions.json"

    @property
    def record(self) -> Path:
        """box.json: what the box is (name, created_at, created_by, network) and how it last stopped."""
        return self.root / "box.json"

    @property
    def incomplete(self) -> Path:
        """Present from the moment the box's directory is made until its /data is restored, verified
        and provisioned: a box that still has it was interrupted mid-creation and is no box to use."""
        return self.root / "incomplete"


@dataclass(frozen=True)
class RunDir:
    """A box's runtime directory, ``runtime_dir/NAME``: its daemon's files and its lock."""

    root: Path

    @property
    def control_socket(self) -> Path:
        return self.root / "control.sock"

    @property
    def daemon_pid(self) -> Path:
        """The daemon's pid, flock-held by the daemon for its whole life."""
        return self.root / "daemon.pid"

    @property
    def init_pid(self) -> Path:
        """The box init's host pid and PID namespace inode, while the box runs."""
        return self.root / "init.pid"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def provision_dir(self) -> Path:
        """Logs of the provisioning steps, one file a step."""
        return self.root / "provision"

    def provision_log(self, step: str) -> Path:
        return self.provision_dir / f"{step}.log"

    @property
    def log(self) -> Path:
        return self.root / "daemon.log"

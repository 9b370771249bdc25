"""BoxLiteProvider: the provider Hermes registers for backend ``box_lite``.

Settings (variables are read through Hermes's secret scope, never elsewhere;
a variable wins over its config.yaml key):

    HERMES_BOX_HOME  / terminal.box_lite_home     where boxes live (unset: hermes-box's XDG directories)
    HERMES_BOX_NAME  / terminal.box_lite_box      one box for every task, used as is (unset: a box per task)
    terminal.container_persistent   true          per-task boxes are kept (stopped) between sessions
    terminal.box_lite_network       -             network of the boxes this backend creates (unset: box.env)

There is no account and no credential: a box is a set of Linux namespaces on
this machine, made by the same box manager as the ``hermes-box`` command, so
``hermes-box ls`` lists the boxes Hermes uses and ``hermes-box enter`` opens one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference.common.credentials import secret
from reference.common.cwd import initial
from reference.common.errors import SettingsError
from reference.common.provider import ReferenceProvider, Row, Setup
from reference.common.settings import as_bool, container_persistent, terminal_settings

HOME_VAR = "HERMES_BOX_HOME"
NAME_VAR = "HERMES_BOX_NAME"
HOME_KEY = "terminal.box_lite_home"
NAME_KEY = "terminal.box_lite_box"
NETWORK_KEY = "terminal.box_lite_network"
# hermes-box's archive passphrase (save/load for unattended use): a secret of this machine that no box,
# and no process Hermes starts, ever gets.
PASSPHRASE_VAR = "BOX_PASSPHRASE"
WORKSPACE = "~/workspace"
INSTALL = "pip install hermes-backend-kit"


@dataclass(frozen=True)
class BoxSettings:
    """What one environment is made with."""

    home: Path | None  # None: hermes-box's XDG directories
    box: str | None  # a configured box, used as is; None: one box per task
    persistent: bool
    network: bool | None  # None: box.env's NETWORK

    @property
    def secrets(self) -> tuple[str, ...]:
        return ()


def _setting(var: str, key: str, terminal: dict[str, Any]) -> tuple[str | None, str]:
    """(value, the name it came from): the variable first, then the config key; None when neither is set."""
    value = secret(var)
    if value is not None:
        return value, var
    raw = terminal.get(key.removeprefix("terminal."))
    text = str(raw).strip() if raw is not None else ""
    return (text or None), key


def _home(terminal: dict[str, Any]) -> Path | None:
    value, where = _setting(HOME_VAR, HOME_KEY, terminal)
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute() or "\0" in value:
        raise SettingsError(
            where,
            f"is {value!r}, not an absolute directory",
            f"name the directory boxes live in with an absolute path, e.g. {HOME_VAR}=~/.local/share/hermes-box",
        )
    return path


def _box(terminal: dict[str, Any]) -> str | None:
    from reference.box_lite.paths import NAME_PATTERN

    value, where = _setting(NAME_VAR, NAME_KEY, terminal)
    if value is None:
        return None
    if not NAME_PATTERN.fullmatch(value):
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise SettingsError(
            where,
            f"is {shown!r}, which is not a box name",
            "use 1 to 63 lowercase letters, digits and '-', starting with a letter or digit (as `hermes-box ls` "
            "shows them), or unset it for one box per task",
        )
    return value


def resolve(container_config: dict[str, Any] | None, terminal: dict[str, Any] | None = None) -> BoxSettings:
    """The settings of one environment; a SettingsError naming the setting for anything unusable."""
    terminal = terminal_settings() if terminal is None else terminal
    home, box = _home(terminal), _box(terminal)
    persistent = container_persistent(container_config, terminal, True)
    raw_network = terminal.get(NETWORK_KEY.removeprefix("terminal."))
    network = None if raw_network in (None, "") else as_bool(raw_network, True, setting=NETWORK_KEY)
    return BoxSettings(home=home, box=box, persistent=persistent or box is not None, network=network)


class BoxLiteProvider(ReferenceProvider):
    name = "box_lite"
    display_name = "Box Lite"
    description = "Run terminal work in a Box Lite box: an isolated Linux box on this machine whose /data is kept."
    env_description = (
        "a Box Lite box on this Linux machine (own PID, mount, IPC and UTS namespaces; system directories "
        "read-only; /data and /home/agent kept, /tmp emptied when the box starts)"
    )
    # Commands run on this machine's kernel, in a box whose files are its own.
    is_remote = False
    is_container = True
    skip_container_guards = True  # no host path is visible in a box: the system directories are read-only binds
    cache_path_base = "~/.hermes"
    default_cwd = WORKSPACE
    conformance_capabilities = frozenset({"persistence", "stdin-stream", "file-sync"})
    # What `hermes-box save` archives and a stop keeps (the home directory lives in it).
    conformance_persistent_path = "/data"
    blocked = frozenset({PASSPHRASE_VAR})

    def setup_instructions(self) -> list[str]:
        return [
            "No account needed: boxes are Linux namespaces on this machine (see `hermes-box --help`).",
            f"Optional: {NAME_VAR}=NAME in ~/.hermes/.env to run every task in one box you made with "
            "`hermes-box new NAME` (unset: one box per task).",
            f"Optional: {HOME_VAR}=DIR in ~/.hermes/.env when your boxes live elsewhere than hermes-box's default.",
        ]

    def configure(self, container_config: dict[str, Any] | None = None, *, image: str | None = None) -> Setup:
        if image:
            self.logger.info("box_lite: boxes use this machine's system directories; image %r is ignored", image)
        return Setup({}, resolve(container_config))

    def is_available(self) -> bool:
        if not sys.platform.startswith("linux") or not Path("/proc/self/ns/pid").exists():
            return False  # boxes are Linux namespaces
        try:
            self.configure()
        except Exception:  # a setting that cannot be read (a broken secret scope) or used
            return False
        return True

    def ready_detail(self, configured: Setup, version: str | None) -> str:
        settings: BoxSettings = configured.settings
        where = f"boxes under {settings.home}" if settings.home else "boxes in hermes-box's default home"
        which = f"box {settings.box} for every task" if settings.box else "one box per task"
        return f"{where}, {which}"

    def _credential_rows(self) -> Iterable[Row]:
        # No credential: the variables it reads through the secret scope instead, each with its value.
        for name, unset in ((HOME_VAR, "hermes-box's XDG directories"), (NAME_VAR, "one box per task")):
            try:
                value = secret(name)
            except SettingsError as exc:
                yield (False, name, f"({exc})")
                continue
            yield (True, name, f"({value})" if value else f"(unset: {unset})")

    def extra_doctor_rows(self, configured: Setup) -> list[Row]:
        settings: BoxSettings = configured.settings
        if settings.box is None:
            return []
        label = f"box {settings.box}"
        try:
            state = _manager(settings).state(settings.box)
        except Exception as exc:
            return [(False, label, f"(its state cannot be read: {type(exc).__name__})")]
        if state in ("broken", "incomplete"):
            return [(False, label, f"({state}: run `hermes-box doctor {settings.box}`)")]
        return [(True, label, f"({state or 'not created yet: the first task creates it'})")]

    def open(self, configured: Setup, *, task_id: str, cwd: str, timeout: int) -> Any:
        from reference.box_lite.environment import BoxLiteEnvironment

        settings: BoxSettings = configured.settings
        return BoxLiteEnvironment(
            manager=_manager(settings),
            settings=settings,
            task_id=task_id,
            cwd=initial(cwd, self.default_cwd),
            timeout=timeout,
            blocked=self.strip_env_keys,
        )


def _manager(settings: BoxSettings) -> Any:
    """The box manager of ``settings.home`` (hermes-box's own home when unset)."""
    from reference.box_lite.boxes import BoxManager
    from reference.box_lite.paths import BoxHome

    home = BoxHome.at(settings.home) if settings.home is not None else BoxHome.xdg()
    return BoxManager(home)

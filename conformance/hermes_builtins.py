"""hermes-agent's built-in local and SSH environments as providers the kit's loader accepts.

``--backend hermes:local`` and ``--backend hermes:ssh`` certify the environments
Hermes's terminal tool builds itself when ``terminal.backend`` is ``local`` or
``ssh``.  Each provider builds its environment through Hermes's own factory
(``_create_environment`` of the terminal tool) with the arguments the terminal
tool passes for that backend, read from the same terminal config keys:

- local: ``cwd`` and ``timeout`` (Hermes's local environment takes nothing else;
  ``local_config`` carries ``local_persistent``, which 0.19.0 reads nowhere);
- ssh: ``ssh_host``, ``ssh_user``, ``ssh_port`` (22), ``ssh_key`` ("") and
  ``persistent_shell`` as ``ssh_config``; its cwd defaults to ``~``, which the
  remote shell expands.

The SSH target comes from --backend-config, written as in Hermes's config.yaml::

    terminal:
      ssh_host: 127.0.0.1
      ssh_port: 2222
      ssh_user: alice
      ssh_key: /path/to/id_ed25519

Both are host-attached: commands run on one machine shared by every task (this
one, or the SSH target), so neither has the ``per-task-sandbox`` kind of the
contract, and their providers say so (``conformance_backend_kind``).

Hermes's SSH environment shares one connection (a ControlMaster socket named
after ``user@host:port`` in ``tempfile.gettempdir()``) with every other SSH
environment to that target, and its ``cleanup()`` ends that connection under
all of them.  One check shows that (``lifecycle.cleanup-spares-others``: it
builds its environments inside ``sharing_as_hermes()``); every other check's
environment gets a connection of its own (a socket directory of its own), so
one check's cleanup cannot decide another check's verdict.  The kit's
own module, not Hermes's: Hermes dispatches these names before any provider, so
the provider names are the kit's (``hermes_local``, ``hermes_ssh``).
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from conformance.errors import BackendConfigError, BackendLoadError

PREFIX = "hermes:"
KINDS = ("local", "ssh")
INSTALL_FIX = "install hermes-agent with: pip install 'hermes-backend-kit[hermes]'"
HOST_ATTACHED = "host-attached"
SSH_KEYS = ("ssh_host", "ssh_user", "ssh_port", "ssh_key")
# Where Hermes keeps the factory its terminal tool builds environments with, newest first.
FACTORY_MODULES = ("tools.terminal_tool_backends", "tools.terminal_tool")


_shared = threading.Event()  # set: environments share connections as Hermes's own code does
_tempdir_lock = threading.Lock()  # tempfile.tempdir is the process's: one SSH environment built at a time


@contextlib.contextmanager
def sharing_as_hermes() -> Iterator[None]:
    """Inside, SSH environments share their connection to a target as in Hermes (one per process and
    target); outside, each has its own.  For the check of what one environment's cleanup does to the others."""
    _shared.set()
    try:
        yield
    finally:
        _shared.clear()


@contextlib.contextmanager
def _connection_of_its_own() -> Iterator[None]:
    """While an SSH environment is built: a fresh, short ``tempfile.gettempdir()`` (its ControlMaster socket
    goes there; a UNIX socket path must stay under 108 bytes), inside the run's temp directory."""
    with _tempdir_lock:
        base = tempfile.gettempdir()
        own = tempfile.mkdtemp(prefix="s", dir=base)
        saved, tempfile.tempdir = tempfile.tempdir, own
        try:
            yield
        finally:
            tempfile.tempdir = saved


def kind_of(spec: str) -> str | None:
    """The built-in a ``hermes:KIND`` spec names, None for any other spec; an unknown KIND is a BackendLoadError."""
    if not spec.startswith(PREFIX):
        return None
    kind = spec[len(PREFIX) :]
    if kind not in KINDS:
        raise BackendLoadError(
            f"--backend {spec}: hermes-agent has no built-in environment {kind!r} the kit certifies",
            f"use one of {', '.join(PREFIX + k for k in KINDS)}",
        )
    return kind


def _factory() -> Any:
    """Hermes's _create_environment, as the active host (hermes-agent) has it."""
    from conformance.host import abi

    host = abi.active()
    if host is None or host.mode != "hermes":
        mode = host.mode if host is not None else "none"
        raise BackendLoadError(
            f"hermes:local and hermes:ssh run hermes-agent's own environments, but this run's host is {mode!r} "
            "(the kit's stand-ins replace Hermes's modules)",
            f"run with --host hermes; if hermes-agent is missing, {INSTALL_FIX}",
        )
    for name in FACTORY_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        factory = getattr(module, "_create_environment", None)
        if callable(factory) and not getattr(module, "__kit_standin__", False):
            return factory
    raise BackendLoadError(
        "the installed hermes-agent has no terminal-tool factory (_create_environment) the kit knows",
        f"certify against hermes-agent 0.19.0: {INSTALL_FIX}",
    )


def _ssh_config(terminal: dict[str, Any]) -> dict[str, Any]:
    """Hermes's ssh_config from the terminal config, as its terminal tool assembles it."""
    missing = [k for k in ("ssh_host", "ssh_user") if not str(terminal.get(k) or "").strip()]
    if missing:
        raise BackendConfigError(
            f"hermes:ssh needs its target in --backend-config: terminal.{' and terminal.'.join(missing)} not set",
            "write terminal: {ssh_host: HOST, ssh_user: USER, ssh_port: PORT, ssh_key: KEY_PATH} in the "
            "--backend-config file (Hermes's own config.yaml keys)",
        )
    try:
        port = int(terminal.get("ssh_port", 22))
    except (TypeError, ValueError):
        raise BackendConfigError(
            f"hermes:ssh: terminal.ssh_port is {terminal.get('ssh_port')!r}, not a port number",
            "write the SSH server's port as a whole number (22 when left out)",
        ) from None
    return {
        "host": str(terminal["ssh_host"]),
        "user": str(terminal["ssh_user"]),
        "port": port,
        "key": str(terminal.get("ssh_key") or ""),
        "persistent": bool(terminal.get("persistent_shell", True)),
    }


def hermes_credentials() -> frozenset[str]:
    """The credential variables Hermes keeps out of the commands of its built-in environments.

    Hermes strips every name of its provider blocklist from a local command's environment (its SSH
    environment forwards none of the host's variables); the credential-like ones are what a plugin
    would list in strip_env_keys.
    """
    from conformance.redact import credential_name

    local = importlib.import_module("tools.environments.local")
    blocklist: frozenset[str] = getattr(local, "_HERMES_PROVIDER_ENV_BLOCKLIST", frozenset())
    return frozenset(name for name in blocklist if credential_name(name))


def provider(kind: str, config: dict[str, Any]) -> Any:
    """A provider (an instance of the active host's TerminalEnvironmentProvider) for the built-in ``kind``."""
    from conformance.host.registry import provider_base_class

    terminal = dict(config.get("terminal") or {})
    factory = _factory()
    ssh_config = _ssh_config(terminal) if kind == "ssh" else None
    base = provider_base_class()

    class HermesBuiltinProvider(base):  # type: ignore[misc, valid-type]  # the active host's class
        """Builds Hermes's built-in ``local`` or ``ssh`` environment exactly as its terminal tool does."""

        name = f"hermes_{kind}"
        is_remote = kind == "ssh"
        is_container = False  # Hermes sends container_config to docker, singularity, modal, daytona only
        session_isolated_when_nonpersistent = False
        conformance_backend_kind = HOST_ATTACHED
        # What the built-in's code does: both pipe stdin to bash (or ssh), only SSH syncs files.
        conformance_capabilities = frozenset({"stdin-stream", "file-sync"} if kind == "ssh" else {"stdin-stream"})
        conformance_disclaims = frozenset({"persistence"} if kind == "ssh" else {"persistence", "file-sync"})

        @property
        def strip_env_keys(self) -> frozenset[str]:
            return hermes_credentials()

        @property
        def display_name(self) -> str:
            return f"Hermes built-in {kind}"

        @property
        def default_cwd(self) -> str | None:
            # Hermes: ssh starts in the remote home ("~"); local in the directory Hermes runs in,
            # for which the kit substitutes the run's own working directory.
            return "~" if kind == "ssh" else None

        def is_available(self) -> bool:
            return kind == "local" or bool(shutil.which("ssh") and shutil.which("scp"))

        def create_environment(
            self,
            *,
            cwd: str,
            timeout: int,
            task_id: str = "default",
            image: str = "",
            container_config: dict[str, Any] | None = None,
            **_: Any,
        ) -> Any:
            own = kind == "ssh" and not _shared.is_set()
            with _connection_of_its_own() if own else contextlib.nullcontext():
                return factory(
                    env_type=kind,
                    image=image,
                    cwd=cwd,
                    timeout=timeout,
                    ssh_config=dict(ssh_config) if ssh_config is not None else None,
                    container_config=None,
                    local_config={"persistent": bool(terminal.get("local_persistent", False))}
                    if kind == "local"
                    else None,
                    task_id=task_id,
                    host_cwd=None,
                )

    HermesBuiltinProvider.__qualname__ = HermesBuiltinProvider.__name__ = f"Hermes{kind.capitalize()}Provider"
    return HermesBuiltinProvider()

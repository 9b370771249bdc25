"""What an isolation driver offers, whatever its mechanism (Linux namespaces today, a VM later)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

# Host directories a box sees read-only (those that exist here; a symlink stays a symlink).
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

StdStream = int | IO[Any] | None


class IsolationError(OSError):
    """A box could not be set up or reached; the message says which step failed and why."""


@dataclass(frozen=True)
class Bind:
    """A host directory shown inside the box at ``target`` (absolute)."""

    source: Path
    target: str
    writable: bool = True


@dataclass(frozen=True)
class BoxFile:
    """A host file shown read-only at ``target`` (absolute) inside the box.

    Meant for a directory the box sees read-only, such as /etc: the target's
    directory must be a system directory (or below one).  The host directory is
    never changed: the box sees an overlay of it with the file added, the whole
    still read-only.  The file is bound, not copied: a change made in place on
    the host (same inode) shows inside; a file replaced by rename shows on the
    box's next start.
    """

    source: Path
    target: str


@dataclass(frozen=True)
class Layer:
    """One overlay of a box's root: ``lower`` (a read-only host directory of the base, shown through an
    idmapped mount so that its files' owners are the box's ids) below an optional ``mask`` (whiteouts
    hiding the base's entries the box may not read), under ``upper`` (writable; ``work`` is overlayfs's
    work directory on the same file system), shown at ``target`` inside the box."""

    target: str
    lower: Path
    upper: Path
    work: Path
    mask: Path | None = None


@dataclass(frozen=True)
class RootLayers:
    """A writable root for a box (its *tools layer* over a base), instead of the read-only system
    directories.

    ``root``: a writable host directory that is the box's ``/`` outside the layers (None when a layer
    targets ``/``); ``layers``: the overlays, mounted shallowest first; ``links``: symbolic links made
    at the root (``/bin -> usr/bin``).  Needs a user namespace whose ids the driver may map onto the
    base (``Driver.root_layers``).
    """

    root: Path | None
    layers: tuple[Layer, ...]
    links: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BoxUser:
    """The ids inside the box a command runs as (``spawn(user=...)``); root when no user is given."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()


@dataclass(frozen=True)
class BoxSpec:
    """One box: its hostname and the host directories it may see (and write, unless read-only).

    ``files``: read-only host files added inside system directories (see
    ``BoxFile``).  ``network``: False gives the box a network namespace of its
    own with only the loopback interface, up (no route off the box); True (the
    default) shares the host's network.  Both are off by default.  ``rootfs``:
    a writable root of layers (see ``RootLayers``) in place of the read-only
    system directories.
    """

    hostname: str
    binds: tuple[Bind, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    files: tuple[BoxFile, ...] = ()
    network: bool = True
    rootfs: RootLayers | None = None


class Running(Protocol):
    """A started box."""

    hostname: str

    @property
    def alive(self) -> bool: ...


class Driver(Protocol):
    name: str

    def available(self) -> tuple[bool, str]:
        """Whether boxes can be started here, and a sentence saying how (or why not)."""
        ...

    @property
    def box_uid(self) -> int:
        """The host uid that root inside a box maps to."""
        ...

    @property
    def box_gid(self) -> int: ...

    @property
    def root_layers(self) -> bool:
        """Whether boxes may have a writable root of layers (``BoxSpec.rootfs``) and run commands as
        users other than root (``spawn(user=...)``)."""
        ...

    def start(self, spec: BoxSpec) -> Running: ...

    def spawn(
        self,
        box: Running,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        stdin: StdStream = None,
        stdout: StdStream = None,
        stderr: StdStream = None,
        tty: bool = False,
        user: BoxUser | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the box, in a session and process group of its own (a PTY on stdin
        becomes its controlling terminal when ``tty``), as ``user`` (the box's root when None); the
        handle behaves as a Popen."""
        ...

    def command_prefix(self, box: Running, cwd: str) -> list[str]:
        """An argv prefix that runs a host command line inside the box (for a plain subprocess)."""
        ...

    def open_pty(self, box: Running) -> tuple[int, int]:
        """(master, slave) of a new terminal that commands in the box can name."""
        ...

    def freeze(self, box: Running) -> None: ...

    def thaw(self, box: Running) -> None: ...

    def stop(self, box: Running, timeout: float = 10.0) -> list[int]:
        """End every process of the box; returns the host pids still found afterwards (none)."""
        ...

    def processes(self, box: Running) -> list[int]:
        """Host pids of the box's processes."""
        ...

"""The isolation engine: boxes whose commands cannot reach the machine they run on.

Shared by the box world under the fake vendor services and by local boxes;
neither a fake nor a reference backend owns it.  A driver starts a box once
(``Driver.start``) and runs any number of commands in it (``spawn``), stops
and continues all of its processes at once (``freeze``/``thaw``) and ends it
(``stop``).  The one driver today is ``NamespaceDriver``: per box, one init
process owning a user namespace (wherever the machine allows one), a mount,
a PID, an IPC and a UTS namespace.

What the boundary protects against, for test purposes:
- reading another process's environment, memory or descriptors: a box's
  /proc shows only the box's own processes;
- signalling a process outside the box: its PID namespace names no other;
- creating, changing or deleting a file outside the box's own directories:
  the root is a private tmpfs, the system directories are bound read-only,
  the box's home, workspace and tmp are the only writable places, and root
  inside maps to a host id owning no host file (running as root) or to the
  calling user (running unprivileged); commands also lose the capabilities
  to mount, make devices or open files by handle;
- seeing another box's files, hostname or System V IPC objects.

Optional per box (off by default): read-only host files added inside the
read-only system directories (``BoxSpec.files``, e.g. /etc/hermes-box.env
while /etc stays read-only, through a read-only overlay of the directory),
a network namespace of the box's own (``BoxSpec.network``), and, run as root,
a writable root of layers over a read-only base instead of the read-only system
directories (``BoxSpec.rootfs``, ``isolation.rootfs``: the base shown through
idmapped mounts, its root-only entries masked) with commands run as a user of
the box (``spawn(user=...)``).

What it does not protect against:
- the network: by default boxes share the host's network namespace, so a
  box can reach any service listening on this machine, loopback included
  (a box started with ``BoxSpec(network=False)`` has a network namespace of
  its own with only a loopback interface, and reaches nothing outside);
- resource exhaustion: no CPU, memory, disk or process-count limits;
- kernel vulnerabilities, and hardware side channels: namespaces are not a
  virtual machine and a hostile kernel exploit defeats them;
- the caller's own files when run unprivileged without a user-id remap: a
  box's root is the calling user, so anything of that user's the box can
  see (only its own directories) it can change;
- machines without usable namespaces, where the callers fall back to host
  paths and say so (``NamespaceDriver.available``).
"""

from isolation.driver import (
    SYSTEM_DIRS,
    Bind,
    BoxFile,
    BoxSpec,
    BoxUser,
    Driver,
    IsolationError,
    Layer,
    RootLayers,
    Running,
)
from isolation.namespaces import ID_RANGE, ROOT_ID_BASE, NamespaceBox, NamespaceDriver
from isolation.popen import BoxPopen

__all__ = [
    "ID_RANGE",
    "ROOT_ID_BASE",
    "SYSTEM_DIRS",
    "Bind",
    "BoxFile",
    "BoxPopen",
    "BoxSpec",
    "BoxUser",
    "Driver",
    "IsolationError",
    "Layer",
    "NamespaceBox",
    "NamespaceDriver",
    "RootLayers",
    "Running",
]

"""A box's resource limits, enforced by the kernel's cgroups.

Three limits, each off unless set (``box.env`` for every box, ``hermes-box new`` flags for one box,
which its box.json keeps): ``PIDS_MAX`` (processes and threads), ``MEMORY_MAX`` (bytes of memory)
and ``CPU_MAX`` (CPUs' worth of time, 1.5 = one and a half).  The box's daemon applies them when it
starts the box: for each limit it makes a cgroup ``hermes-box-NAME-PID`` below its own cgroup in the
controller's hierarchy (cgroup v2 where the machine mounts it with the controller delegated there;
else the v1 hierarchy of that controller, as on machines that mount v1 ``pids``, ``memory`` and
``cpu``), writes the limit and moves the box's init into it, so every process of the box is counted
there.  The cgroups are removed when the box stops; one left by a daemon killed outright is removed
the next time that box starts.

A limit that cannot be enforced (no such controller, not delegated, not permitted: creating
cgroups takes root or a delegated subtree) does not stop the box: ``Enforcement`` says why, and
the daemon's ``ping`` carries it to the doctor.  Standard library only (the daemon imports this).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limit:
    """One limit: its setting's name, the controller that enforces it, and the value."""

    key: str  # PIDS_MAX | MEMORY_MAX | CPU_MAX
    controller: str  # pids | memory | cpu
    value: float

    def files(self, v2: bool) -> dict[str, str]:
        """The controller's files and what to write in them."""
        if self.controller == "pids":
            return {"pids.max": str(int(self.value))}
        if self.controller == "memory":
            return {("memory.max" if v2 else "memory.limit_in_bytes"): str(int(self.value))}
        quota = max(1000, int(self.value * CPU_PERIOD_US))
        if v2:
            return {"cpu.max": f"{quota} {CPU_PERIOD_US}"}
        return {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": str(quota)}

    def shown(self) -> str:
        if self.controller == "memory":
            return f"{self.key}={int(self.value) // (1024 * 1024)}M"
        return f"{self.key}={self.value:g}"


def wanted(values: dict[str, Any]) -> list[Limit]:
    """The limits set in ``values`` (``pids_max``, ``memory_max``, ``cpu_max``; None or 0 is off)."""
    found = []
    for key, controller in (("PIDS_MAX", "pids"), ("MEMORY_MAX", "memory"), ("CPU_MAX", "cpu")):
        value = values.get(key.lower())
        if value:
            found.append(Limit(key, controller, float(value)))
    return found


@dataclass
class Enforcement:
    """What a box's daemon enforces: ``enforced`` (limit -> cgroup directory) and ``refused``
    (limit -> why it is not enforced); ``as_json`` for the daemon's ping."""

    enforced: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list)

    def as_json(self) -> dict[str, dict[str, str]]:
        return {"enforced": dict(self.enforced), "refused": dict(self.refused)}

    def release(self) -> None:
        """Remove the box's cgroups (its processes have ended: an empty cgroup is removed at once)."""
        for path in self.paths:
            with contextlib.suppress(OSError):
                path.rmdir()
        self.paths.clear()


def apply(name: str, pid: int, limits: list[Limit]) -> Enforcement:
    """Put process ``pid`` (the box's init) under each of ``limits``; never raises for a limit that
    cannot be enforced: it goes to ``refused`` with the reason."""
    done = Enforcement()
    for limit in limits:
        try:
            parent, v2 = _parent(limit.controller)
        except _NotHere as exc:
            done.refused[limit.shown()] = str(exc)
            continue
        _sweep(parent, name)
        group = parent / f"hermes-box-{name}-{os.getpid()}"
        try:
            group.mkdir(exist_ok=True)
        except OSError as exc:
            done.refused[limit.shown()] = f"cannot make a cgroup under {parent} ({exc.strerror}): it takes root"
            continue
        done.paths.append(group)
        try:
            if v2 and limit.controller not in (group / "cgroup.controllers").read_text().split():
                raise _NotHere(
                    f"the cgroup v2 controller {limit.controller} is not delegated to {parent} "
                    "(its cgroup.subtree_control lacks it)"
                )
            for filename, value in limit.files(v2).items():
                (group / filename).write_text(value)
            (group / "cgroup.procs").write_text(str(pid))
        except (OSError, _NotHere) as exc:
            done.refused[limit.shown()] = str(exc) if isinstance(exc, _NotHere) else f"{group}: {exc.strerror}"
            with contextlib.suppress(OSError):
                group.rmdir()
            done.paths.remove(group)
            continue
        done.enforced[limit.shown()] = str(group)
    return done


class _NotHere(Exception):
    """This machine offers no place for the controller's cgroup (the message says why)."""


def _parent(controller: str) -> tuple[Path, bool]:
    """The directory of this process's own cgroup in ``controller``'s hierarchy, and whether it is v2."""
    mounts = _mounts()
    memberships = _memberships()
    v2_mount = mounts.get("")
    if v2_mount is not None and controller in _read_words(v2_mount[0] / "cgroup.controllers"):
        return _under(v2_mount, memberships.get("", "/")), True
    v1_mount = mounts.get(controller)
    if v1_mount is not None:
        return _under(v1_mount, memberships.get(controller, "/")), False
    raise _NotHere(f"this machine mounts no cgroup hierarchy with the {controller} controller")


def _under(mount: tuple[Path, str], path: str) -> Path:
    """``path`` (as /proc/self/cgroup says it) inside ``mount`` (mount point, root of the mount)."""
    point, root = mount
    rel = os.path.relpath(path, root) if path == root or path.startswith(root.rstrip("/") + "/") else path
    return point / rel.lstrip("/") if rel not in (".", "/") else point


def _mounts() -> dict[str, tuple[Path, str]]:
    """Controller -> (mount point, mount root) of its v1 hierarchy; "" -> the v2 (unified) one."""
    found: dict[str, tuple[Path, str]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        head, _, tail = line.partition(" - ")
        parts, rest = head.split(), tail.split()
        if len(parts) < 5 or len(rest) < 3:
            continue
        root, point, fstype, options = parts[3], Path(parts[4]), rest[0], rest[2].split(",")
        if fstype == "cgroup2":
            found.setdefault("", (point, root))
        elif fstype == "cgroup":
            for option in options:
                found.setdefault(option, (point, root))
    return found


def _memberships() -> dict[str, str]:
    """Controller -> this process's cgroup path in its hierarchy ("" -> the v2 one)."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                found[controller] = parts[2]
    return found


def _read_words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _sweep(parent: Path, name: str) -> None:
    """Remove box ``name``'s cgroups left by a daemon killed outright (their pid no longer runs)."""
    try:
        entries = list(parent.glob(f"hermes-box-{name}-*"))
    except OSError:
        return
    for entry in entries:
        pid = entry.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                entry.rmdir()
        except OSError:
            continue

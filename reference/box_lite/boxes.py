"""BoxManager: create, start, stop and remove boxes, and run commands in them.

A box is its persistent directory ``data_dir/boxes/NAME`` (``data/`` is its
/data and, under ``data/home``, its /home/agent; ``tmp/`` its /tmp, emptied at
each start; ``managed/`` the host copies of managed assets; ``box.json`` what
the box is), its registry entry, and, while it runs, one daemon
(``reference.box_lite.daemon``) holding its namespaces, reached through
``runtime_dir/NAME/control.sock``.

State: ``running`` while its daemon lives (it holds an flock on
``daemon.pid``); ``stopped`` when no daemon runs and box.json records a clean
stop; ``broken`` otherwise: the daemon died without a stop, the directory or
box.json is missing or unreadable, or the registry and the directory disagree.
``start`` recovers a broken box whose directory is intact (what remains of the
dead daemon's box is ended first); ``stop`` of a broken box ends what remains
and records the stop.

``create`` takes the box's lock, makes the directory (refusing one that
exists: a same-named directory is never touched), records in box.json a nonce
proving this call made it, runs ``populate`` on the empty /data, provisions
the managed assets, registers the box and starts it.  If anything fails, or
HUP, INT or TERM arrives (on the main thread), it undoes only what it made:
its daemon, its registry entry (if it still carries the nonce) and its
directory (if box.json still carries the nonce), then raises (BoxInterrupted
for a signal: exit 128+N).

A box with a machine (machine.py: run as root with user namespaces) has a
``tools/`` layer over its base image as its ``/``, and its commands run as its
user ``agent`` (uid 1000 inside) unless they ask for root (``popen(root=True)``);
otherwise they run as the box's root (uid 0 inside, a host id owning no host
file).  Either way with ``USER=agent``, ``HOME=/home/agent``, a standard PATH
and, by default, ``~/workspace`` as working directory; ``popen`` returns a ``control.BoxCommand``
(a ``subprocess.Popen``).  Signals sent to it reach the command's whole tree.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import isolation
import reference
from archives import remove_tree
from isolation.rootfs import Base
from reference.box_lite import control, provision
from reference.box_lite.backup import Backup, latest_backup
from reference.box_lite.errors import (
    BoxBroken,
    BoxError,
    BoxExists,
    BoxNotFound,
    BoxNotRunning,
    BoxStartFailed,
)
from reference.box_lite.interrupts import Held, Interrupts
from reference.box_lite.locks import BoxLock, flock_held, remove_lock_file
from reference.box_lite.paths import AGENT_ID, HOME_INSIDE, WORKSPACE_INSIDE, BoxDir, BoxHome, check_name
from reference.box_lite.records import json_bytes, mark_stopped, publish_atomic, read_object, utc_now
from reference.box_lite.registry import Registry
from reference.box_lite.settings import Settings

DAEMON_MODULE = "reference.box_lite.daemon"
BOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DAEMON_START_TIMEOUT_S = 60.0
DAEMON_EXIT_TIMEOUT_S = 15.0
WAIT_FREE_SLICE_S = 0.02  # longest wait between checks that a daemon has let go of daemon.pid
LOG_LIMIT = 1 << 20  # daemon.log is started afresh beyond this
Populate = Callable[[Path], None]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BoxInfo:
    """One box as ``boxes()`` and ``create`` report it."""

    name: str
    state: str | None  # "running" | "stopped" | "broken" (None: no such box)
    created_at: str | None
    network: bool
    data_dir: Path
    last_backup: Backup | None


def box_env(name: str, extra: dict[str, str] | None = None, *, tty: bool = False, root: bool = False) -> dict[str, str]:
    """The environment of a command in box ``name``: the box user's (its root's with ``root``), with
    ``extra`` on top."""
    env = {
        "USER": "root" if root else "agent",
        "LOGNAME": "root" if root else "agent",
        "HOME": "/root" if root else HOME_INSIDE,
        "PATH": BOX_PATH,
        "LANG": "C.UTF-8",
        "HOSTNAME": name,
        "HERMES_BOX": name,
        "TMPDIR": "/tmp",
    }
    if tty:
        env["TERM"] = os.environ.get("TERM") or "xterm-256color"
    env.update(extra or {})
    return env


class _Made:
    """What one ``create`` call made, so that its cleanup touches nothing else."""

    def __init__(self) -> None:
        self.nonce = secrets.token_hex(16)
        self.dir: tuple[int, int] | None = None  # (device, inode) of the directory it made
        self.marked = False  # box.json with the nonce written
        self.registered = False
        self.launched = False
        self.ready_fd = -1  # the launched daemon's ready pipe, until it has reported

    def close(self) -> None:
        if self.ready_fd != -1:
            os.close(self.ready_fd)
            self.ready_fd = -1


class BoxManager:
    """Boxes under one ``BoxHome`` (see the module docstring)."""

    def __init__(self, home: BoxHome, settings: Settings | None = None):
        self.home = home
        self.settings = settings if settings is not None else Settings.load(home.settings_file)
        self.registry = Registry(home)
        self._driver: Any = None

    # -- ids --------------------------------------------------------------------------------------
    def box_ids(self) -> tuple[int, int]:
        """The host ids that root inside a box maps to."""
        return self._engine().box_uid, self._engine().box_gid

    def _engine(self) -> Any:
        if self._driver is None:
            from isolation import NamespaceDriver

            self._driver = NamespaceDriver(spares=0, probe=False)
        return self._driver

    def data_owner(self, machine: bool) -> tuple[int, int]:
        """The host ids /data's files belong to: the box's agent in a box with a machine, else its root."""
        uid, gid = self.box_ids()
        return (uid + AGENT_ID, gid + AGENT_ID) if machine else (uid, gid)

    # -- machine ------------------------------------------------------------------------------------
    def machine(self) -> tuple[dict[str, Any], Base] | None:
        """What a new or repaired box's machine is (box.json's ``machine`` and its base), from box.env's
        BASE_IMAGE; None where the engine cannot give boxes a writable root (unprivileged: the box keeps
        the read-only system directories and runs as its root)."""
        if not self._engine().root_layers:
            return None
        from reference.box_lite import machine

        base = machine.base_image(self.home, self.settings.base_image)
        record: dict[str, Any] = {"base": self.settings.base_image}
        if base.whole:
            record["base_dir"] = str(base.dirs[0][1])
        return record, base

    # -- what exists --------------------------------------------------------------------------------
    def data_dir(self, name: str) -> Path:
        """The host directory that is the box's /data."""
        return self.home.box(name).data

    def box_json(self, name: str) -> dict[str, Any] | None:
        """The box's box.json, None when missing or unreadable."""
        return read_object(self.home.box(name).record)

    def intact(self, name: str) -> dict[str, Any] | None:
        """box.json of a box whose directory is whole (box.json naming it, and its /data); else None."""
        info = self.box_json(name)
        if info is None or info.get("name") != name or not self.data_dir(name).is_dir():
            return None
        return info

    def refuse_incomplete(self, name: str, consequence: str) -> None:
        """BoxBroken when box ``name``'s creation was interrupted (its /data may be partial)."""
        if self.home.box(name).incomplete.exists():
            raise BoxBroken(
                f"box {name} {consequence}",
                "its creation (a load or new) was interrupted, so its /data may be partial",
                f"remove it (hermes-box rm {name} --force) and load its archive again (hermes-box load ARCHIVE {name})",
            )

    def daemon_pid(self, name: str) -> int | None:
        """The pid of the box's live daemon (it holds daemon.pid's flock), None when none runs."""
        path = self.home.run(name).daemon_pid
        if not flock_held(path):
            return None
        try:
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None  # the daemon has the flock and is writing its pid: not serving yet

    def exists(self, name: str) -> bool:
        """Whether box ``name`` is registered or has a directory."""
        return self.registry.get(name) is not None or self.home.box(name).root.exists()

    def require(self, name: str) -> str:
        """``name`` if a box of that name exists (in any state), else BoxNotFound."""
        if not self.exists(name):
            raise BoxNotFound(
                f"there is no box named {name}",
                f"no such box in {self.home.describe()}",
                f"list boxes with `hermes-box ls`, or create it with `hermes-box new {name}`",
            )
        return name

    def disagreements(self, name: str) -> list[str]:
        """What keeps box ``name``'s registry entry, directory and box.json from agreeing (none: a whole box)."""
        entry = self.registry.get(name)
        box = self.home.box(name)
        found = [] if entry is not None else ["the box is not in registry.json"]
        if not box.root.is_dir():
            return [*found, f"its directory {box.root} is missing"]
        info = self.box_json(name)
        if info is None:
            found.append("box.json is missing or unreadable")
        elif info.get("name") != name:
            found.append(f"box.json names {info.get('name')!r}")
        elif entry is not None and _nonce(entry) not in (None, _nonce(info)):
            found.append("the registry entry is of another box of that name (another creation nonce)")
        if not box.data.is_dir():
            found.append("its data directory is missing")
        return found

    def state(self, name: str) -> str | None:
        """ "running" | "stopped" | "broken" | "incomplete", or None when there is no such box (see the module)."""
        if not self.exists(check_name(name)):
            return None
        if self.home.box(name).incomplete.exists():
            return "incomplete"
        whole = not self.disagreements(name)
        if self.daemon_pid(name) is not None:
            return "running" if whole else "broken"
        info = self.box_json(name)
        if whole and info is not None and info.get("stopped_cleanly") is True:
            return "stopped"
        return "broken"

    def names(self) -> list[str]:
        """Registered boxes and box directories (a directory with a box.json), sorted."""
        names = set(self.registry.names())
        if self.home.boxes_dir.is_dir():
            for entry in self.home.boxes_dir.iterdir():
                if BoxDir(entry).record.is_file():
                    with contextlib.suppress(BoxError):
                        names.add(check_name(entry.name))
        return sorted(names)

    def info(self, name: str) -> BoxInfo:
        entry = self.registry.get(name) or {}
        info = self.box_json(name) or {}
        return BoxInfo(
            name=name,
            state=self.state(name),
            created_at=info.get("created_at") or entry.get("created_at"),
            network=bool(info.get("network", entry.get("network", True))),
            data_dir=self.data_dir(name),
            last_backup=latest_backup(self.home, name),
        )

    def boxes(self) -> list[BoxInfo]:
        """Every box (registered or on disk) with its state and most recent backup."""
        return [self.info(name) for name in self.names()]

    # -- locks ----------------------------------------------------------------------------------
    def lock(self, name: str, action: str) -> BoxLock:
        """The box's lock for a mutation (a context manager; BoxLocked names the holder's PID)."""
        return BoxLock(self.home, check_name(name), action)

    # -- create ---------------------------------------------------------------------------------------
    def create(
        self,
        name: str,
        *,
        network: bool | None = None,
        limits: dict[str, Any] | None = None,
        populate: Populate | None = None,
        progress: Progress | None = None,
        hold_workload: bool = False,
    ) -> BoxInfo:
        """Make, provision, register and start box ``name`` (see the module docstring).

        ``populate(data_dir)`` fills the new, empty /data before provisioning
        (``load`` restores an archive there); its files are then given to the
        box's root.  ``progress(step)`` is called after each step: "directory",
        "populated", "provisioned", "registered", "launched", "started".
        ``hold_workload``: the box's workload stays stopped until ``release_workload`` (``load``
        verifies the restore first).
        """
        check_name(name)
        net = self.settings.network if network is None else bool(network)
        step = progress or (lambda _: None)
        self.home.ensure()
        chosen = self.machine()  # an unusable BASE_IMAGE stops here, before anything is made
        made = _Made()
        try:
            with Interrupts() as interrupts, self.lock(name, "create") as lock:
                try:
                    self._create(name, net, limits or {}, populate, step, made, chosen, hold_workload)
                    interrupts.settled = True
                except BaseException:
                    interrupts.settled = True
                    self._undo(name, made)
                    if not self.exists(name):  # nothing of a box is left: neither are its runtime files
                        self._drop_runtime(name, lock)
                    raise
                finally:
                    made.close()
        finally:
            if not self.exists(name):  # the emptied runtime directory, once the lock is released
                with contextlib.suppress(OSError):
                    self.home.run(name).root.rmdir()
        interrupts.deliver_late()
        return self.info(name)

    def _create(
        self,
        name: str,
        network: bool,
        limits: dict[str, Any],
        populate: Populate | None,
        step: Progress,
        made: _Made,
        chosen: tuple[dict[str, Any], Base] | None = None,
        hold_workload: bool = False,
    ) -> None:
        box = self.home.box(name)
        if self.registry.get(name) is not None:
            raise BoxExists(
                f"box {name} already exists",
                "it is registered",
                f"choose another name, or remove it: hermes-box rm {name}",
            )
        try:
            box.root.mkdir(mode=0o700)
        except FileExistsError:
            raise BoxExists(
                f"{box.root} already exists",
                "a directory of that name is there and this command did not make it; it is left as it is",
                f"choose another name, or move {box.root} away if it is no longer needed",
            ) from None
        st = box.root.stat()
        made.dir = (st.st_dev, st.st_ino)
        record = {
            "format": 1,
            "name": name,
            "created_at": utc_now(),
            "created_by": {"pid": os.getpid(), "nonce": made.nonce},
            "network": network,
            "stopped_cleanly": True,
        }
        if limits:
            record["limits"] = {k: v for k, v in limits.items() if v is not None}  # this box's own, over box.env
        if chosen is not None:
            record["machine"] = chosen[0]
        publish_atomic(box.record, json_bytes(record))
        made.marked = True
        box.incomplete.write_text("creation in progress (hermes-box new or load); removed when /data is complete\n")
        uid = self.box_ids()[0]
        for path in (box.data, box.tmp, box.managed):
            path.mkdir(mode=0o755)
        step("directory")
        if populate is not None:
            populate(box.data)
            step("populated")
        box.data.chmod(0o755)
        owner = self.data_owner(chosen is not None)
        provision.own_tree(box.data, *owner)
        provision.provision(box, name, self.settings.render(), *owner)
        if chosen is not None:
            from reference.box_lite import machine

            machine.make_tools(self.home, box, chosen[1], uid)
        self.provision_workload(name, hold=hold_workload)
        box.incomplete.unlink()
        step("provisioned")
        with self.registry.update() as boxes:
            if name in boxes:
                raise BoxExists(f"box {name} already exists", "another command registered it meanwhile", "")
            boxes[name] = {"created_at": record["created_at"], "network": network, "nonce": made.nonce}
        made.registered = True
        step("registered")
        self._launch(name, made, step)
        step("started")
        if chosen is not None:
            from reference.box_lite import machine

            machine.provision(self, name)
            step("tools")

    def _undo(self, name: str, made: _Made) -> None:
        """Remove what ``create`` made (and only that), newest first."""
        problems: list[str] = []
        if made.launched:
            try:
                self._abort_launch(name, made)
            except BoxError as exc:
                problems.append(str(exc))
            self._forget_runtime(name)
        if made.registered or made.dir is not None:  # a signal may have come just after the registry was written
            with self.registry.update() as boxes:
                entry = boxes.get(name)
                if entry is not None and _nonce(entry) == made.nonce:
                    del boxes[name]
        if made.dir is not None:
            box_dir = self.home.box(name).root
            try:
                st = box_dir.lstat()
                same = (st.st_dev, st.st_ino) == made.dir
            except FileNotFoundError:
                same = None
            marked = _nonce(self.box_json(name)) == made.nonce
            ours = bool(same) and (marked or not made.marked)
            if same is None:
                pass  # already gone
            elif ours and not problems:
                remove_tree(box_dir)
            elif not ours:
                problems.append(f"{box_dir} no longer carries this command's mark; it was left in place")
        if problems:
            print(f"hermes-box: cleanup of box {name} was incomplete: {'; '.join(problems)}", file=sys.stderr)

    # -- start / stop -----------------------------------------------------------------------------------
    def start(self, name: str) -> None:
        """Start box ``name`` (nothing to do if it runs); recovers a broken box whose directory is intact.

        Interrupted by HUP, INT or TERM (main thread), it leaves the box stopped and raises BoxInterrupted.
        """
        made = _Made()
        with Interrupts() as interrupts, self.lock(name, "start"):
            try:
                self._require(name)
                if self.daemon_pid(name) is not None:
                    return
                self._launch(name, made, lambda _: None)
                interrupts.settled = True
            except BaseException:
                interrupts.settled = True
                if made.launched:
                    with contextlib.suppress(BoxError):
                        self._abort_launch(name, made)
                    self._forget_runtime(name)
                raise
            finally:
                made.close()
        interrupts.deliver_late()

    def stop(self, name: str, *, grace: float | None = None) -> None:
        """Stop every process of box ``name`` (SIGTERM, ``grace`` s, then SIGKILL), keeping its state."""
        with self.lock(self.require(name), "stop"):
            self._halt(name, grace)
            self._forget_runtime(name)
            mark_stopped(self.home.box(name).record, clean=True)

    def _require(self, name: str) -> dict[str, Any]:
        """box.json of a box that can be started (registered, directory and /data present)."""
        self.refuse_incomplete(name, "cannot start")
        info = self.intact(self.require(name))
        if info is None:
            raise _damaged(name, "cannot start", self.home.box(name).root)
        if self.registry.get(name) is None:
            raise BoxBroken(
                f"box {name} cannot start", "it is not in the registry", f"register it again: hermes-box repair {name}"
            )
        return info

    def _launch(self, name: str, made: _Made, step: Progress) -> None:
        """Start the box's daemon and wait until it serves (or says why it cannot).

        ``made.ready_fd`` stays open until the daemon has reported, so that a
        caller interrupted meanwhile can wait for it before ending it
        (``_abort_launch``): a daemon is never left to start a box unseen.
        """
        self._end_remnants(name)
        run = self.home.run(name)
        run.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_path = run.log
        with contextlib.suppress(FileNotFoundError):
            if log_path.stat().st_size > LOG_LIMIT:
                log_path.unlink()
        made.ready_fd, ready_w = os.pipe2(os.O_CLOEXEC)
        try:
            log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                argv = [
                    *_daemon_command(),
                    "--box-dir",
                    str(self.home.box(name).root),
                    "--run-dir",
                    str(run.root),
                    "--ready-fd",
                    str(ready_w),
                    name,
                ]
                made.launched = True
                launcher = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=log_fd,
                    pass_fds=[ready_w],
                    start_new_session=True,
                    close_fds=True,
                    env=_daemon_env(),
                    cwd="/",
                )
            finally:
                os.close(log_fd)
        finally:
            os.close(ready_w)
        step("launched")
        launcher.wait()  # the daemon detaches at once: its launcher exits
        answer = _read_until_eof(made.ready_fd, DAEMON_START_TIMEOUT_S)
        made.close()
        if answer != "ok":
            why = answer or f"its daemon exited without a word (see {log_path})"
            raise BoxStartFailed(f"box {name} did not start", why, f"see {log_path}; then hermes-box doctor {name}")

    def _abort_launch(self, name: str, made: _Made) -> None:
        """End a daemon this call launched: first wait until it has reported (started, or given up)."""
        if made.ready_fd != -1:
            _read_until_eof(made.ready_fd, DAEMON_START_TIMEOUT_S)
            made.close()
        self._halt(name, 0.0)

    def _halt(self, name: str, grace: float | None = None) -> None:
        """End the box's daemon and every process of the box; verified, or a BoxError saying what is left."""
        grace = self.settings.stop_timeout if grace is None else grace
        run = self.home.run(name)
        pid_file = run.daemon_pid
        if self.daemon_pid(name) is not None:
            try:
                control.stop(run.control_socket, name=name, grace=grace)
                answered = True
            except BoxError:
                answered = False  # not answering: ended by signal below
            if not _wait_free(pid_file, DAEMON_EXIT_TIMEOUT_S if answered else 0.2):
                pid = self.daemon_pid(name)
                if pid is not None and _is_daemon(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)  # the daemon's own clean stop
                    if not _wait_free(pid_file, DAEMON_EXIT_TIMEOUT_S):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)  # its box ends with it (the engine's guarantee)
                        _wait_free(pid_file, DAEMON_EXIT_TIMEOUT_S)
        self._end_remnants(name)
        if self.daemon_pid(name) is not None:
            raise BoxError(
                f"box {name}'s daemon does not exit",
                f"PID {self.daemon_pid(name)} ignores stop, SIGTERM and SIGKILL",
                "check the machine (a hung kernel task?) and retry",
            )

    def _end_remnants(self, name: str) -> None:
        """The box init a dead daemon left (if it still runs: it ends at once with its daemon): ended."""
        path = self.home.run(name).init_pid
        try:
            pid, pidns = (int(x) for x in path.read_text().split()[:2])
        except (OSError, ValueError):
            return
        if self.daemon_pid(name) is not None:
            return  # a live daemon owns it
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            fd = -1
        if fd != -1:
            try:
                if os.stat(f"/proc/{pid}/ns/pid").st_ino == pidns:  # still that box's init, not a recycled pid
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    import select

                    select.select([fd], [], [], DAEMON_EXIT_TIMEOUT_S)
            except OSError:
                pass
            finally:
                os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def _forget_runtime(self, name: str) -> None:
        """The runtime files of a stopped daemon (the lock and the log stay)."""
        if self.daemon_pid(name) is not None:
            return
        run = self.home.run(name)
        for path in (run.control_socket, run.init_pid, run.daemon_pid):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _drop_runtime(self, name: str, lock: BoxLock) -> None:
        """The last runtime files of a box that no longer exists: its log and its lock file (held by the
        caller); the emptied runtime directory goes once the lock is released."""
        self._forget_runtime(name)
        with contextlib.suppress(FileNotFoundError):
            self.home.run(name).log.unlink()
        remove_tree(self.home.run(name).provision_dir)
        remove_lock_file(lock)

    # -- remove -------------------------------------------------------------------------------------------
    def remove(self, name: str) -> None:
        """Stop box ``name`` and delete it: its /data, registry entry and runtime files.

        A directory that is not a box (no box.json naming it) is refused, not deleted.
        """
        with self.lock(self.require(name), "remove") as lock:
            box_dir = self.home.box(name).root
            info = self.box_json(name)
            if box_dir.exists() and (info is None or info.get("name") != name):
                raise BoxBroken(
                    f"{box_dir} is not box {name}'s directory",
                    "it has no box.json naming the box, so it was not made by hermes-box; it is left as it is",
                    f"move it away by hand if it is not needed, then: hermes-box rm {name} --force",
                )
            self._halt(name, 0.0)
            self._forget_runtime(name)
            if box_dir.exists():
                remove_tree(box_dir)
            self.registry.remove(name)
            self._drop_runtime(name, lock)
        with contextlib.suppress(OSError):
            self.home.run(name).root.rmdir()

    # -- commands ----------------------------------------------------------------------------------------
    def popen(
        self,
        name: str,
        argv: list[str] | tuple[str, ...],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        tty: bool = False,
        root: bool = False,
        **popen_kwargs: Any,
    ) -> control.BoxCommand:
        """Start ``argv`` in the running box (BoxNotRunning if it is not): a Popen-like BoxCommand.

        It runs as the box's ``agent`` (a box with a machine; see machine.py), or with ``root`` as
        the box's root.  ``env`` is added to that user's environment (``box_env``); ``cwd``
        defaults to ~/workspace.  stdin/stdout/stderr as for Popen (None: the
        box's /dev/null).  With ``tty`` the command gets a terminal of the box's
        own (``BoxCommand.pty`` is its master; see ``control.interact``).
        """
        return control.BoxCommand(
            list(argv),
            control=self.home.run(name).control_socket,
            box=name,
            tty=tty,
            root=root,
            env=box_env(name, env, tty=tty, root=root),
            cwd=cwd or WORKSPACE_INSIDE,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            **popen_kwargs,
        )

    def exec(self, name: str, argv: list[str] | tuple[str, ...], **kw: Any) -> int:
        """Run ``argv`` in the box to its end; its exit code (negative: the signal that ended it)."""
        with self.popen(name, argv, **kw) as command:
            return command.wait()

    def processes(self, name: str) -> list[dict[str, Any]]:
        """The running box's processes: host ``pid``, ``box_pid``, ``state`` and ``argv``."""
        answer = control.request(self.home.run(name).control_socket, {"op": "processes"}, name=name)
        return list(answer.get("processes") or [])

    def signal(self, name: str, command_id: int, signum: int) -> int:
        """Signal the tree of a command (by its ``BoxCommand.ident``); how many processes got it."""
        message = {"op": "signal", "id": command_id, "sig": int(signum)}
        answer = control.request(self.home.run(name).control_socket, message, name=name)
        return int(answer.get("count") or 0)

    def ping(self, name: str, *, timeout: float = 5.0) -> dict[str, Any]:
        """What the running box's daemon says of it (pid, init, ``frozen``, ``limits``); {} for a box that
        is not running, ControlError when its daemon does not answer within ``timeout``."""
        try:
            return control.request(self.home.run(name).control_socket, {"op": "ping"}, name=name, timeout=timeout)
        except BoxNotRunning:
            return {}

    def frozen(self, name: str, *, timeout: float = 5.0) -> bool:
        """Whether the running box's processes are stopped for a save (its daemon says so)."""
        return bool(self.ping(name, timeout=timeout).get("frozen"))

    @contextlib.contextmanager
    def quiesce(self, name: str) -> Iterator[None]:
        """Stop (SIGSTOP) every process of the running box for the block, continue them after.

        A stopped box needs nothing: the block just runs.  HUP, INT and TERM are held while the box is
        frozen and while it is thawed (a signal that came meanwhile is delivered inside the block, or
        after the thaw), so a signal never leaves the box frozen; and the freeze is held on a connection
        to the box's daemon, which thaws the box if this process is killed outright.
        """
        sock = self.home.run(name).control_socket
        if self.daemon_pid(name) is None:
            yield
            return
        held = Held()
        held.hold()
        try:
            # The daemon ends the workload first (it starts again at the thaw), and thaws the box if
            # this process dies meanwhile.
            with control.frozen(sock, name=name, workload=True):
                try:
                    held.release()
                    yield
                finally:
                    held.hold()
        finally:
            held.release()

    # -- the workload and its endpoint -------------------------------------------------------------------
    def provision_workload(self, name: str, *, hold: bool = False) -> None:
        """What the box's daemon needs to run its workload: the environment of the commands it starts
        itself, the box's endpoint token (made once), and with ``EXPOSE_EXECUTOR_WEB`` and a
        ``WORKLOAD`` a forwarded host port (dropped when exposure is off); ``hold`` keeps the workload
        stopped at the first start (see ``release_workload``)."""
        from reference.box_lite import endpoint, workload

        box = self.home.box(name)
        endpoint.ensure_token(box)
        if self.settings.workload:
            publish_atomic(box.command_env, json_bytes(box_env(name)))
        if self.settings.expose_executor_web and self.settings.workload:
            endpoint.assign_port(self.home, name, self.settings.executor_port_lo, self.settings.executor_port_hi)
        else:
            record = self.box_json(name)
            if record is not None and record.pop("endpoint", None) is not None:
                publish_atomic(box.record, json_bytes(record))
        if hold:
            publish_atomic(workload.held_marker(box), b"held until the restore is verified (hermes-box load)\n")

    def release_workload(self, name: str) -> None:
        """Let a held workload start (``load``, once the restored box is verified)."""
        from reference.box_lite import workload

        with contextlib.suppress(FileNotFoundError):
            workload.held_marker(self.home.box(name)).unlink()
        if self.daemon_pid(name) is not None:
            control.request(self.home.run(name).control_socket, {"op": "workload", "action": "release"}, name=name)

    def workload_status(self, name: str, action: str = "status") -> dict[str, Any]:
        """The running box's daemon's answer to ``workload`` {action} (status, up, down, logs)."""
        return control.request(
            self.home.run(name).control_socket, {"op": "workload", "action": action}, name=name, timeout=40.0
        )

    # -- repair ------------------------------------------------------------------------------------------
    def refresh_assets(self, name: str) -> None:
        """Rewrite the managed assets (and register a box whose registry entry is lost), keeping /data."""
        with self.lock(self.require(name), "repair"):
            self.refuse_incomplete(name, "cannot be repaired")
            info = self.intact(name)
            if info is None:
                raise _damaged(name, "cannot be repaired", self.home.box(name).root)
            chosen = self.machine()
            was_running = False
            if chosen is None:
                provision.provision(self.home.box(name), name, self.settings.render(), *self.box_ids())
            else:
                was_running = self._rebuild_machine(name, info, chosen)
            self.provision_workload(name)
            with self.registry.update() as boxes:
                entry = boxes.get(name)
                if entry is None or _nonce(entry) not in (None, _nonce(info)):
                    boxes[name] = {
                        "created_at": info.get("created_at") or utc_now(),
                        "network": bool(info.get("network", True)),
                        "nonce": _nonce(info),
                    }
            if chosen is not None:
                self._provision_machine(name, was_running=was_running)

    def _rebuild_machine(self, name: str, info: dict[str, Any], chosen: tuple[dict[str, Any], Base]) -> bool:
        """Stop the box, replace its tools layer by a new one over ``chosen``'s base, give /data to its
        agent and refresh the managed assets (repair; /data's content is not touched); whether the box
        was running."""
        from reference.box_lite import machine

        box = self.home.box(name)
        was_running = self.daemon_pid(name) is not None
        if was_running:
            self._halt(name)
            self._forget_runtime(name)
            mark_stopped(box.record, clean=True)
        machine.make_tools(self.home, box, chosen[1], self.box_ids()[0], rescan=True)
        updated = {**(self.box_json(name) or info), "machine": chosen[0]}
        publish_atomic(box.record, json_bytes(updated))
        owner = self.data_owner(True)
        provision.own_tree(box.data, *owner)
        provision.provision(box, name, self.settings.render(), *owner)
        return was_running

    def _provision_machine(self, name: str, *, was_running: bool) -> None:
        """Start the box, run the provisioning steps into its new tools layer, and leave it as it was."""
        from reference.box_lite import machine

        self.start(name)
        try:
            machine.provision(self, name)
        finally:
            if not was_running:
                self.stop(name)


# -- helpers ----------------------------------------------------------------------------------------------
def _nonce(record: dict[str, Any] | None) -> str | None:
    """The creating call's nonce in a registry entry or a box.json (None if it has none)."""
    if not isinstance(record, dict):
        return None
    by = record.get("created_by")
    nonce = by.get("nonce") if isinstance(by, dict) else record.get("nonce")
    return nonce if isinstance(nonce, str) else None


def _damaged(name: str, consequence: str, box_dir: Path) -> BoxBroken:
    return BoxBroken(
        f"box {name} {consequence}",
        f"its directory {box_dir} or box.json is missing or damaged, so its /data is lost",
        f"remove it (hermes-box rm {name} --force) and restore a backup with hermes-box load",
    )


def _daemon_env() -> dict[str, str]:
    """The daemon's environment: locale, time zone and PATH, nothing of the caller's secrets.

    It finds its code through ``_daemon_command``'s explicit path, so no PYTHON* variable is passed
    (its interpreter runs isolated and would ignore them anyway)."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ")
    return {k: v for k, v in os.environ.items() if k in keep}


def _code_roots() -> list[str]:
    """The directories holding the daemon's packages (``reference`` and ``isolation``), each once.

    Taken from the imported packages' files, so they are right for an editable install (whose
    import hook needs site processing, which the daemon skips), a normal install in
    site-packages and a source tree on PYTHONPATH alike."""
    roots: list[str] = []
    for module in (reference, isolation):
        where = module.__file__
        if where is None:
            raise BoxError(f"cannot locate package {module.__name__}", "it has no file", "reinstall hermes-backend-kit")
        root = os.path.dirname(os.path.dirname(os.path.abspath(where)))
        if root not in roots:
            roots.append(root)
    return roots


def _daemon_command() -> list[str]:
    """The interpreter command that runs ``DAEMON_MODULE``'s ``run``, before the daemon's arguments.

    ``-I -S``: no site processing (no .pth file, one of which imports third-party modules the daemon
    never uses, and no user site) and no PYTHON* variable; the daemon needs only the standard
    library and this project, whose roots are appended to sys.path after the standard library's
    (a root may be site-packages: nothing there may shadow a standard module).
    The command line names ``DAEMON_MODULE``, which is how a daemon is recognised in /proc."""
    boot = f"import sys; sys.path.extend({_code_roots()!r}); from {DAEMON_MODULE} import run; run()"
    return [sys.executable, "-I", "-S", *_bytecode_flags(), "-c", boot]


def _bytecode_flags() -> list[str]:
    """This process's bytecode settings for the daemon, whose ``-I`` ignores PYTHON* variables: the same
    cache prefix, or no bytecode written where this process writes none."""
    if sys.pycache_prefix:
        return ["-X", f"pycache_prefix={sys.pycache_prefix}"]
    return ["-B"] if sys.dont_write_bytecode else []


def _read_until_eof(fd: int, timeout: float) -> str:
    import select

    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"it did not report within {timeout:.0f} s"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                return b"".join(chunks).decode(errors="replace").strip()
            chunks.append(chunk)


def _wait_free(pid_file: Path, timeout: float) -> bool:
    """Wait until no process holds ``pid_file``'s flock (the daemon has exited); whether it is free.

    Between checks it waits for the exit of the pid the file names (a process's files, so its flock,
    are released before its exit is reported), at most ``WAIT_FREE_SLICE_S`` at a time: a pid file
    not yet written, or naming a recycled pid, costs no more than polling would."""
    import select

    deadline = time.monotonic() + timeout
    while flock_held(pid_file):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        pause = min(left, WAIT_FREE_SLICE_S)
        try:
            pidfd = os.pidfd_open(int(pid_file.read_bytes().split()[0]))
        except (OSError, ValueError, IndexError):
            time.sleep(pause)
            continue
        try:
            select.select([pidfd], [], [], pause)
        finally:
            os.close(pidfd)
    return True


def _is_daemon(pid: int) -> bool:
    try:
        return DAEMON_MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False

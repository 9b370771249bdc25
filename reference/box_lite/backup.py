"""Box Lite's backups: ``save`` a box's /data, ``load`` an archive into a new box, ``extract`` one.

The archive format is ``archives`` (OpenPGP AES-256 of a gzipped tar, ``manifest.json`` then
``data/``); a box's /data is the payload, so ``~/workspace/f`` is ``data/home/workspace/f``.
A box's backups are ``backups/NAME-<UTC time>.tar.gz.gpg`` (``-2``, ``-3``... for more in one
second); ``latest_backup`` is the one reading of those names.

- ``save`` takes the box's lock, freezes the box's processes while its /data is read (a stopped
  box needs nothing), writes ``backups/NAME-<UTC time>.tar.gz.gpg`` (or ``out``; an existing file
  is never replaced), then decrypts and lists the written archive to verify it; an archive that
  fails verification, or a save that is interrupted, leaves no file.  A symbolic link that is
  absolute or leads out of /data cannot be archived (load would refuse it): save names such links
  and how to fix them, and ``unsaveable_links`` lists them beforehand (the doctor warns).
- ``load`` decrypts and validates the whole archive before any box exists; only then does the
  box manager create the box, whose ``populate`` step restores the archive into the new, empty
  /data with fail-fast extraction; provisioning then refreshes the managed assets.  On any
  failure or HUP/INT/TERM the manager removes what it made (box directory, registry entry,
  daemon).
- ``extract`` validates, then writes ``manifest.json`` and ``data/`` into a new directory under
  ``backups/`` (mode 0700).  Its contents are secret material.

No plaintext is ever written to a temporary file: the tar.gz streams between gpg and this
process through pipes; the only partial files are ciphertext (mode 0600, removed on failure),
the box's own /data, and the extraction directory (removed on failure).

Signals (``interrupts.Interrupts``): the first HUP, INT or TERM raises ``BoxInterrupted`` (exit
128+N) wherever the work is; later ones are noted so the cleanup runs to its end.  Archive errors
become the box manager's: a refused input is ``ArchiveRefused`` (exit 2), a failure here (gpg
missing or failing, /data unreadable) a ``BoxError`` (exit 1).

For tests, ``HERMES_BOX_TEST_PAUSE=STAGE`` makes the operation stop at that named stage (it says
``hermes-box: paused at STAGE`` on stderr) until a signal arrives or a minute passes; the stages
are listed in ``STAGES``.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import archives
from archives.members import escaping_links
from reference.box_lite.errors import ArchiveRefused, BoxError, BoxExists
from reference.box_lite.interrupts import Interrupts
from reference.box_lite.paths import DATA_INSIDE, BoxHome, check_name, inside
from reference.box_lite.records import STAMP_FORMAT, human_age

if TYPE_CHECKING:
    from reference.box_lite.boxes import BoxInfo, BoxManager
    from reference.box_lite.settings import Settings

SUFFIX = ".tar.gz.gpg"
NAME_STAMP = "%Y%m%d-%H%M%SZ"  # the UTC second in a backup's name: names sort by time, no ':' in them
_STEM = re.compile(r"(?P<stamp>\d{8}-\d{6}Z)(?:-(?P<count>[1-9]\d*))?")
PAUSE_ENV = "HERMES_BOX_TEST_PAUSE"
PAUSE_SECONDS = 60.0
STAGES = (
    "save:locked",  # the box's lock is held, nothing frozen yet
    "save:quiesced",  # the box is frozen, the archive not started
    "save:writing",  # the first MiB of /data is in the partial archive
    "save:written",  # the archive is published, not yet verified
    "save:verifying",  # the written archive is being decrypted and listed
    "load:validating",  # the archive is being validated, no box exists
    "load:validated",  # the archive passed, no box exists yet
    "load:restoring",  # the new box's /data is being restored
    "load:provisioned",  # the box is restored and provisioned, not yet registered
    "load:registered",  # the box is registered, its daemon not started
    "extract:validating",  # the archive is being validated, nothing written
    "extract:writing",  # the extraction directory is being written
)
_FIRST_DATA = 1024 * 1024
LINK_SCAN_S = 5.0  # how long save spends listing the links it refused
LINK_FIX = (
    "make each such link relative to a path inside /data, or replace it by a copy of its target; "
    "a Python virtual environment: make it again with `python3 -m venv --copies DIR`"
)
# Archive errors that mean the operation failed here rather than that its input was refused.
_FAILURES = (archives.GpgFailed, archives.GpgUnavailable, archives.SourceError)

Progress = Callable[[int, "int | None"], None]
"""``progress(done_bytes, total_bytes | None)``, as the command line's progress bar takes it."""


# -- the backups of a box ------------------------------------------------------------------------


@dataclass(frozen=True)
class Backup:
    """One of a box's backups: ``backups/NAME-<UTC time>[-N].tar.gz.gpg``."""

    path: Path
    when: dt.datetime
    count: int = 1  # N of the Nth backup made in that second

    @property
    def when_text(self) -> str:
        return self.when.strftime(STAMP_FORMAT)

    @property
    def age_seconds(self) -> float:
        return max(0.0, (dt.datetime.now(dt.UTC) - self.when).total_seconds())

    @property
    def age_text(self) -> str:
        return human_age(self.age_seconds)


def new_backup_path(home: BoxHome, name: str) -> Path:
    """``backups/NAME-<UTC time>.tar.gz.gpg``, with ``-2``, ``-3``... if that second is taken."""
    base = f"{name}-{dt.datetime.now(dt.UTC).strftime(NAME_STAMP)}"
    candidate = home.backups_dir / f"{base}{SUFFIX}"
    count = 1
    while os.path.lexists(candidate):
        count += 1
        candidate = home.backups_dir / f"{base}-{count}{SUFFIX}"
    return candidate


def stale_partials(home: BoxHome, name: str) -> list[Path]:
    """The partial archives of box ``name`` under ``backups/`` (``.NAME-<time>.tar.gz.gpg.<hex>.partial``),
    left by a save that was killed outright: a save removes its own on every other path.  Only a
    caller holding the box's lock may take them for stale (a save in progress holds it)."""
    pattern = re.compile(rf"\.{re.escape(check_name(name))}-{_STEM.pattern}{re.escape(SUFFIX)}\.[0-9a-f]{{8}}\.partial")
    try:
        entries = list(home.backups_dir.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if pattern.fullmatch(p.name) and p.is_file() and not p.is_symlink())


def latest_backup(home: BoxHome, name: str) -> Backup | None:
    """Box ``name``'s most recent backup under ``backups/``, None if it has none.

    Only names ``new_backup_path`` makes count, read whole: box ``alpha`` never takes box
    ``alpha-2``'s ``alpha-2-<time>.tar.gz.gpg`` for one of its own.
    """
    prefix = f"{check_name(name)}-"
    try:
        entries = list(home.backups_dir.iterdir())
    except OSError:
        return None
    found: list[Backup] = []
    for path in entries:
        if not (path.name.startswith(prefix) and path.name.endswith(SUFFIX)) or not path.is_file():
            continue
        match = _STEM.fullmatch(path.name[len(prefix) : -len(SUFFIX)])
        if match is None:
            continue
        try:
            when = dt.datetime.strptime(match["stamp"], NAME_STAMP).replace(tzinfo=dt.UTC)
        except ValueError:
            continue  # digits that are no time
        found.append(Backup(path, when, int(match["count"] or 1)))
    return max(found, key=lambda b: (b.when, b.count)) if found else None


@dataclass(frozen=True)
class LinkScan:
    """The symbolic links under a box's /data that no archive holds: (path inside the box, target)."""

    links: list[tuple[str, str]]
    complete: bool  # False: the time allowed ran out before all of /data was seen
    entries: int  # how many entries were looked at


def unsaveable_links(data: Path, *, seconds: float | None = None) -> LinkScan:
    """The links under ``data`` (a box's /data) that save would refuse: absolute, or leading out of
    /data when followed through the tree's other links as the system follows them
    (``archives.members.escaping_links``, the rule every archive is read and written by).

    Links are read, never followed.  ``seconds`` bounds the walk (``complete`` says whether it got
    through; the links seen by then are judged among themselves).
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    links: dict[str, str] = {}
    entries = 0
    complete = True
    stack = [(data, "")]
    while stack:
        if deadline is not None and time.monotonic() >= deadline:
            complete = False
            break
        folder, rel = stack.pop()
        try:
            listing = os.scandir(folder)
        except OSError:
            continue
        with listing:
            for entry in listing:
                entries += 1
                sub = f"{rel}/{entry.name}" if rel else entry.name
                try:
                    if entry.is_symlink():
                        links[sub] = os.readlink(entry.path)
                    elif entry.is_dir(follow_symlinks=False):
                        stack.append((Path(entry.path), sub))
                except OSError:
                    continue
    found = [(inside(e.rel), e.target) for e in escaping_links(links)]
    return LinkScan(found, complete, entries)


def describe_links(links: list[tuple[str, str]]) -> str:
    """``PATH -> TARGET`` of the first few links, and how many more."""
    shown = ", ".join(f"{path} -> {target}" for path, target in links[:3])
    return shown + (f" and {len(links) - 3} more" if len(links) > 3 else "")


# -- save, load, extract -------------------------------------------------------------------------


def save(
    manager: BoxManager,
    name: str,
    out: Path | None = None,
    *,
    passphrase: archives.Passphrase | None = None,
    progress: Progress | None = None,
) -> Path:
    """Write an encrypted, verified archive of box ``name``'s /data; returns its path."""
    manager.require(check_name(name))
    data = manager.data_dir(name)
    if not data.is_dir():
        raise ArchiveRefused(f"box {name} has no /data to save", f"{data} is missing", "the box cannot be saved")
    if out is not None:
        _refuse_existing(Path(out))
    with _as_box_errors():
        secret = passphrase or archives.Passphrase.obtain(confirm=True)
    limits = _limits(manager.settings)
    manager.home.ensure()
    with Interrupts() as interrupts, manager.lock(name, "save"):
        for stale in stale_partials(manager.home, name):  # the lock is ours: no save of this box is writing
            stale.unlink(missing_ok=True)
        _pause("save:locked")
        target = Path(out) if out is not None else new_backup_path(manager.home, name)
        published = False
        try:
            with manager.quiesce(name), _as_box_errors():
                _pause("save:quiesced")
                try:
                    archives.write_tree(
                        data,
                        target,
                        kind="box",
                        name=name,
                        passphrase=secret,
                        limits=limits,
                        progress=_watch(progress, {"archive": "save:writing"}),
                        tools=archive_tools(manager, name),
                        settings=box_settings(manager, name),
                    )
                except archives.EscapingLink as exc:
                    raise _unsaveable(name, data, exc) from exc
            published = True
            _pause("save:written")
            with _as_box_errors(target):
                archives.verify(
                    target, secret, kind="box", limits=limits, progress=_watch(progress, {"verify": "save:verifying"})
                )
            interrupts.settled = True
        except BaseException:
            interrupts.settled = True
            if published:
                _remove_ours(target)
            raise
    interrupts.deliver_late()
    return target


def archive_tools(manager: BoxManager, name: str) -> dict[str, str]:
    """The manifest's tool versions, for diagnosis: Box Lite's, and what provisioning installed in the
    box's tools layer (``box:TOOL``; an archive holds /data only, so a load installs tools afresh)."""
    from reference.box_lite.machine import installed_versions

    tools = {"hermes-box": "box_lite"}
    tools.update({f"box:{k}": str(v) for k, v in installed_versions(manager.home.box(name)).items()})
    return tools


def box_settings(manager: BoxManager, name: str) -> dict[str, Any]:
    """What defines a box beyond its /data, as its archive's manifest records it: its network, and
    the limits set for it alone (``new --pids-max ...``; box.env's stay the machine's)."""
    settings: dict[str, Any] = {"network": manager.info(name).network}
    own = (manager.box_json(name) or {}).get("limits")
    if isinstance(own, dict) and own:
        settings["limits"] = own
    return settings


def load(
    manager: BoxManager,
    archive: Path,
    new_name: str,
    *,
    passphrase: archives.Passphrase | None = None,
    progress: Progress | None = None,
    network: bool | None = None,
    on_settings: Callable[[str], None] | None = None,
) -> BoxInfo:
    """Validate ``archive`` whole, then create box ``new_name`` with the archive as its /data.

    The new box gets the settings the archive records (its network); ``network`` overrides the
    recorded value, and ``on_settings`` hears a line about what was restored or overridden.  An
    archive that records none gets this machine's defaults."""
    archive = Path(archive)
    if manager.exists(check_name(new_name)):
        raise BoxExists(
            f"box {new_name} already exists",
            "load creates a new box and never restores over one",
            f"choose another name, or remove it first: hermes-box rm {new_name}",
        )
    with _as_box_errors(archive):
        secret = passphrase or archives.Passphrase.obtain()
    limits = _limits(manager.settings)
    with Interrupts() as interrupts:
        with _as_box_errors(archive):
            checked = archives.verify(
                archive, secret, kind="box", limits=limits, progress=_watch(progress, {"verify": "load:validating"})
            )
        _pause("load:validated")
        net = _restored_network(checked.manifest.settings, network, on_settings or (lambda _: None))

        def populate(data_dir: Path) -> None:
            with _as_box_errors(archive):
                restored = archives.extract(
                    archive,
                    data_dir,
                    secret,
                    kind="box",
                    limits=limits,
                    progress=_watch(progress, {"extract": "load:restoring"}),
                    validated=checked,
                )
            if (restored.members, restored.payload_bytes) != (checked.members, checked.payload_bytes):
                raise BoxError(
                    f"{archive.name}: the restore does not match the archive",
                    f"{restored.members} members and {restored.payload_bytes} bytes restored, "
                    f"{checked.members} and {checked.payload_bytes} validated",
                    "load the archive again; if this persists, check the disk",
                )

        def step(done: str) -> None:
            if done in ("provisioned", "registered"):
                _pause(f"load:{done}")

        own_limits = _restored_limits(checked.manifest.settings.get("limits"), on_settings or (lambda _: None))
        # The workload stays stopped until the restore is verified (populate compares it with the
        # validated archive), then starts.
        info = manager.create(
            new_name, network=net, limits=own_limits, populate=populate, progress=step, hold_workload=True
        )
        manager.release_workload(new_name)
        interrupts.settled = True
    interrupts.deliver_late()
    return info


def _restored_network(recorded: dict[str, Any], asked: bool | None, say: Callable[[str], None]) -> bool | None:
    """The new box's network: ``asked`` when given (said when it differs from the archive's), else the
    archive's, else None (this machine's default)."""
    saved = recorded.get("network")
    saved = saved if isinstance(saved, bool) else None
    words = {True: "on", False: "off (loopback only)"}
    if asked is not None:
        if saved is not None and saved != asked:
            say(f"network {words[asked]} as asked; the saved box had it {words[saved]}")
        return asked
    if saved is not None:
        say(f"network {words[saved]}, as the saved box had it")
    return saved


def _restored_limits(recorded: Any, say: Callable[[str], None]) -> dict[str, Any]:
    """The limits the archive records for its box alone, each read as box.env reads it (0 is off); a
    value box.env would refuse is left out, and said."""
    from reference.box_lite.settings import KEYS, Invalid

    kept: dict[str, Any] = {}
    for key, value in (recorded or {}).items() if isinstance(recorded, dict) else ():
        spec = KEYS.get(str(key).upper())
        if spec is None or str(key).upper() not in ("PIDS_MAX", "MEMORY_MAX", "CPU_MAX") or isinstance(value, bool):
            continue
        try:
            parsed = spec.parse("off" if value == 0 else str(value))
        except Invalid as exc:
            say(f"the archive's {str(key).upper()}={value!r} {exc.problem}; left out")
            continue
        kept[str(key).lower()] = 0 if parsed is None else parsed
    if kept:
        say("limits as the saved box had them: " + ", ".join(f"{k.upper()}={v or 'off'}" for k, v in kept.items()))
    return kept


def extract(
    home: BoxHome,
    archive: Path,
    *,
    passphrase: archives.Passphrase | None = None,
    progress: Progress | None = None,
    settings: Settings | None = None,
) -> Path:
    """Validate ``archive``, then write it into a new directory under ``backups/``; returns it.

    The directory holds ``manifest.json`` and ``data/`` as the archive does.  Its contents are
    secret material (credentials, sessions, private work): the caller says so.
    """
    archive = Path(archive)
    with _as_box_errors(archive):
        secret = passphrase or archives.Passphrase.obtain()
    limits = _limits(settings)
    home.ensure()
    with Interrupts() as interrupts:
        dest = _new_directory(home.backups_dir, _stem(archive))
        try:
            with _as_box_errors(archive):
                archives.extract(
                    archive,
                    dest,
                    secret,
                    limits=limits,
                    progress=_watch(progress, {"validate": "extract:validating", "extract": "extract:writing"}),
                    with_manifest=True,
                )
            interrupts.settled = True
        except BaseException:
            interrupts.settled = True
            archives.remove_tree(dest)
            raise
    interrupts.deliver_late()
    return dest


# -- helpers -------------------------------------------------------------------------------------


def _limits(settings: Settings | None) -> archives.Limits:
    return archives.DEFAULT_LIMITS if settings is None else archives.Limits(max_bytes=settings.save_size_limit)


@contextmanager
def _as_box_errors(archive: Path | None = None) -> Iterator[None]:
    """The archive package's errors as the box manager's (what, why and fix kept; ``archive`` named):
    a refused input is ArchiveRefused (exit 2), a failure here a BoxError (exit 1)."""
    try:
        yield
    except archives.ArchiveError as exc:
        what = f"{archive.name}: {exc.what}" if archive is not None else exc.what
        raise (BoxError if isinstance(exc, _FAILURES) else ArchiveRefused)(what, exc.why, exc.fix) from exc


def _unsaveable(name: str, data: Path, refused: archives.EscapingLink) -> ArchiveRefused:
    """Save's refusal of box ``name``: every link no archive holds (as far as a short walk finds them)."""
    links = unsaveable_links(data, seconds=LINK_SCAN_S).links
    if links:
        count = f"{len(links)} symbolic links" if len(links) > 1 else "a symbolic link"
        what = f"box {name} cannot be saved: {count} under {DATA_INSIDE} would not restore ({describe_links(links)})"
    else:
        what = f"box {name} cannot be saved: {refused.what}"
    return ArchiveRefused(
        what,
        f"an archive keeps only links that stay inside {DATA_INSIDE}: an absolute link, or one leading out of "
        f"{DATA_INSIDE}, would point at whatever the machine restoring it has there, so load refuses them",
        f"{LINK_FIX}; then save again (`hermes-box doctor {name}` lists such links)",
    )


def _stem(archive: Path) -> str:
    name = archive.name
    for suffix in (SUFFIX, ".gpg", ".pgp"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or "archive"
    return name


def _new_directory(parent: Path, stem: str) -> Path:
    """A directory under ``parent`` made by this call (mode 0700): never one that existed."""
    count = 1
    while True:
        candidate = parent / (f"{stem}.extracted" if count == 1 else f"{stem}.extracted-{count}")
        try:
            os.mkdir(candidate, 0o700)
            return candidate
        except FileExistsError:
            count += 1


def _refuse_existing(path: Path) -> None:
    """Before any passphrase is asked: ``out`` must be new (the archive writer refuses it again)."""
    if os.path.lexists(path):
        raise BoxExists(
            f"{path} already exists",
            "save never writes over an existing file",
            "choose another --out, or leave it out for backups/NAME-<UTC time>.tar.gz.gpg",
        )


def _remove_ours(path: Path) -> None:
    """Remove the archive this save published (an unverified or interrupted one is no backup)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _watch(progress: Progress | None, pauses: dict[str, str]) -> archives.Progress:
    """An archives progress callback: forwards to ``progress``, and pauses (test hook) once per stage.

    ``pauses`` maps an archives step ("archive", "verify", "validate", "extract") to the stage
    name it pauses at: a writing step after its first MiB (or all of a smaller tree), a reading
    step at its first member.
    """
    done_stages: set[str] = set()

    def report(step: str, done: int, total: int | None) -> None:
        if progress is not None:
            progress(done, total)
        stage = pauses.get(step)
        if stage is None or stage in done_stages:
            return
        if step == "archive" and done < _FIRST_DATA and (total is None or done < total):
            return
        done_stages.add(stage)
        _pause(stage)

    return report


def _pause(stage: str) -> None:
    """Stop here while ``HERMES_BOX_TEST_PAUSE`` names ``stage`` (until a signal, or a minute)."""
    if os.environ.get(PAUSE_ENV) != stage:
        return
    sys.stderr.write(f"hermes-box: paused at {stage}\n")
    sys.stderr.flush()
    deadline = time.monotonic() + PAUSE_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.05)

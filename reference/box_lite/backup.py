"""Box Lite's backups: ``save`` a box's /data, ``load`` an archive into a new box, ``extract`` one.

The archive format is ``archives`` (OpenPGP AES-256 of a gzipped tar, ``manifest.json`` then
``data/``); a box's /data is the payload, so ``~/workspace/f`` is ``data/home/workspace/f``.

- ``save`` takes the box's lock, freezes the box's processes while its /data is read (a stopped
  box needs nothing), writes ``backups/NAME-<UTC time>.tar.gz.gpg`` (or ``out``; an existing file
  is never replaced), then decrypts and lists the written archive to verify it; an archive that
  fails verification, or a save that is interrupted, leaves no file.
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

Signals: the first HUP, INT or TERM raises ``BoxInterrupted`` (exit 128+N) wherever the work is;
later ones are noted and ignored so the cleanup runs to its end.  The requests that freeze and
thaw the box run with those signals held (delivered right after), so a signal cannot leave the
box frozen.

For tests, ``HERMES_BOX_TEST_PAUSE=STAGE`` makes the operation stop at that named stage (it says
``hermes-box: paused at STAGE`` on stderr) until a signal arrives or a minute passes; the stages
are listed in ``STAGES``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import archives
from reference.box_lite.errors import ArchiveRefused, BoxExists, BoxInterrupted, BoxNotFound
from reference.box_lite.paths import BoxHome, check_name

if TYPE_CHECKING:
    from reference.box_lite.boxes import BoxInfo, BoxManager
    from reference.box_lite.settings import Settings

SUFFIX = ".tar.gz.gpg"
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

Progress = Callable[[int, "int | None"], None]
"""``progress(done_bytes, total_bytes | None)``, as the command line's progress bar takes it."""


def save(
    manager: BoxManager,
    name: str,
    out: Path | None = None,
    *,
    passphrase: archives.Passphrase | None = None,
    progress: Progress | None = None,
) -> Path:
    """Write an encrypted, verified archive of box ``name``'s /data; returns its path."""
    check_name(name)
    if manager.state(name) is None:
        raise BoxNotFound(
            f"no box named {name}",
            f"nothing is registered or stored under {manager.home.describe()}",
            "list the boxes with hermes-box ls",
        )
    data = manager.data_dir(name)
    if not data.is_dir():
        raise ArchiveRefused(f"box {name} has no /data to save", f"{data} is missing", "the box cannot be saved")
    if out is not None:
        _refuse_existing(Path(out))
    secret = passphrase or archives.Passphrase.obtain(confirm=True)
    limits = _limits(manager.settings)
    manager.home.ensure()
    with _interruptible(), manager.lock(name, "save"):
        _pause("save:locked")
        target = Path(out) if out is not None else _new_archive_path(manager.home, name)
        published = False
        held = _Held()
        try:
            held.hold()  # a signal during the freeze or the thaw waits, so the box is never left frozen
            try:
                with manager.quiesce(name):
                    held.release()
                    try:
                        _pause("save:quiesced")
                        archives.write_tree(
                            data,
                            target,
                            kind="box",
                            name=name,
                            passphrase=secret,
                            limits=limits,
                            progress=_watch(progress, {"archive": "save:writing"}),
                            tools={"hermes-box": "box_lite"},
                        )
                    finally:
                        held.hold()
            finally:
                held.release()
            published = True
            _pause("save:written")
            archives.verify(
                target, secret, kind="box", limits=limits, progress=_watch(progress, {"verify": "save:verifying"})
            )
        except BaseException:
            if published:
                _remove_ours(target)
            raise
    return target


def load(
    manager: BoxManager,
    archive: Path,
    new_name: str,
    *,
    passphrase: archives.Passphrase | None = None,
    progress: Progress | None = None,
) -> BoxInfo:
    """Validate ``archive`` whole, then create box ``new_name`` with the archive as its /data."""
    check_name(new_name)
    archive = Path(archive)
    if manager.state(new_name) is not None or manager.home.box_dir(new_name).exists():
        raise BoxExists(
            f"box {new_name} already exists",
            "load creates a new box and never restores over one",
            f"choose another name, or remove it first: hermes-box rm {new_name}",
        )
    secret = passphrase or archives.Passphrase.obtain()
    limits = _limits(manager.settings)
    with _interruptible():
        try:
            checked = archives.verify(
                archive, secret, kind="box", limits=limits, progress=_watch(progress, {"verify": "load:validating"})
            )
        except archives.ArchiveError as exc:
            raise _refused(exc, archive) from exc
        _pause("load:validated")

        def populate(data_dir: Path) -> None:
            try:
                archives.extract(
                    archive,
                    data_dir,
                    secret,
                    kind="box",
                    limits=limits,
                    progress=_watch(progress, {"extract": "load:restoring"}),
                    validated=checked,
                )
            except archives.ArchiveError as exc:
                raise _refused(exc, archive) from exc

        def step(done: str) -> None:
            if done in ("provisioned", "registered"):
                _pause(f"load:{done}")

        return manager.create(new_name, populate=populate, progress=step)


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
    secret = passphrase or archives.Passphrase.obtain()
    limits = archives.Limits(max_bytes=settings.save_size_limit) if settings is not None else archives.DEFAULT_LIMITS
    home.ensure()
    with _interruptible():
        dest = _new_directory(home.backups_dir, _stem(archive))
        try:
            archives.extract(
                archive,
                dest,
                secret,
                limits=limits,
                progress=_watch(progress, {"validate": "extract:validating", "extract": "extract:writing"}),
                with_manifest=True,
            )
        except BaseException as exc:
            archives.remove_tree(dest)
            if isinstance(exc, archives.ArchiveError):
                raise _refused(exc, archive) from exc
            raise
    return dest


# -- helpers -------------------------------------------------------------------------------------


def _limits(settings: Settings) -> archives.Limits:
    return archives.Limits(max_bytes=settings.save_size_limit)


def _refused(exc: archives.ArchiveError, archive: Path) -> ArchiveRefused:
    """The archive's refusal as the box manager's error (bad input: exit 2), naming the archive."""
    return ArchiveRefused(f"{archive.name}: {exc.what}", exc.why, exc.fix)


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%SZ")


def _new_archive_path(home: BoxHome, name: str) -> Path:
    """``backups/NAME-<UTC time>.tar.gz.gpg``, with ``-2``, ``-3``... if that second is taken."""
    base = f"{name}-{_stamp()}"
    candidate = home.backups_dir / f"{base}{SUFFIX}"
    count = 1
    while os.path.lexists(candidate):
        count += 1
        candidate = home.backups_dir / f"{base}-{count}{SUFFIX}"
    return candidate


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


_WATCHED = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)


class _Held:
    """HUP, INT and TERM blocked while held; one that arrived meanwhile is delivered on release."""

    def __init__(self) -> None:
        self._previous: set[int | signal.Signals] | None = None

    def hold(self) -> None:
        if self._previous is None:
            self._previous = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)

    def release(self) -> None:
        if self._previous is not None:
            previous, self._previous = self._previous, None
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def _interruptible() -> Iterator[None]:
    """HUP, INT and TERM raise BoxInterrupted once; later ones are ignored so cleanup can finish."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        if not fired:
            fired.append(signum)
            raise BoxInterrupted(signum)
        fired.append(signum)

    previous = {signum: signal.signal(signum, handler) for signum in _WATCHED}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)

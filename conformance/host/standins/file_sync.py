"""Stand-in for ``tools.environments.file_sync``: push Hermes files, pull changes back.

Behaviour from research/hermes-host.md section 4: change detection by
(mtime, size), deletions propagated, transactional state (a failed sync is
retried in full next time and does not advance the rate-limit clock), SHA-256
of what was pushed, and a sync-back that maps tar members "/<name>" to host
paths (a new file below a synced file's directory maps below that file's
host directory, as hermes-agent 0.19.0 does), never writes credential files
back, and never raises.  Like current hosts (0.21), it refuses to write into
HERMES_HOME's skills/ and plugins/, onto config.yaml or .env, through a path
with ".." parts, or through a host symlink that leads out of the file's
directory; hermes-agent 0.19.0 writes all of those (the sync-back-guard host
feature tells the two apart).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import posixpath
import shlex
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from conformance.host.standins.hermes_constants import get_hermes_home

logger = logging.getLogger("tools.environments.file_sync")

_FORCE_ENV = "HERMES_FORCE_FILE_SYNC"
_MAX_TAR_BYTES = 2 * 1024**3
_SYNC_BACK_MAX_RETRIES = 3  # attempts of a sync-back (plugins import the name)
_BACKOFF = (2.0, 4.0)  # seconds before the second and the third
_CACHE_DIRS = ("documents", "images", "audio", "videos", "screenshots", "web", "delegation", "spillover")
_FLAT_DIRS = ("images", "attachments", "composer-pastes")


def _walk(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not Path(dirpath, d).is_symlink()]
        out += [Path(dirpath, f) for f in filenames if not Path(dirpath, f).is_symlink()]
    return sorted(out)


def credential_files() -> list[Path]:
    """Host credential files listed under terminal.credential_files in config.yaml."""
    home = get_hermes_home()
    try:
        config = yaml.safe_load((home / "config.yaml").read_text("utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    listed = (config.get("terminal") or {}).get("credential_files") or []
    out = []
    for item in listed:
        path = Path(str(item)).expanduser()
        path = path if path.is_absolute() else home / path
        if path.is_file():
            out.append(path)
    return out


def _credential_host_paths() -> set[str]:
    """The credential files, resolved: pushed to a sandbox, never written back."""
    return {_resolved(p) for p in credential_files()}


def iter_sync_files(container_base: str = "/root/.hermes") -> list[tuple[str, str]]:
    home = get_hermes_home()
    base = container_base.rstrip("/")
    pairs: list[tuple[str, str]] = []
    for path in credential_files():
        try:
            rel = path.relative_to(home).as_posix()
        except ValueError:
            continue
        pairs.append((str(path), f"{base}/{rel}"))
    for path in _walk(home / "skills"):
        pairs.append((str(path), f"{base}/skills/{path.relative_to(home / 'skills').as_posix()}"))
    for sub in _CACHE_DIRS:
        root = home / "cache" / sub
        pairs += [(str(p), f"{base}/cache/{sub}/{p.relative_to(root).as_posix()}") for p in _walk(root)]
    for sub in _FLAT_DIRS:
        root = home / sub
        pairs += [(str(p), f"{base}/{sub}/{p.relative_to(root).as_posix()}") for p in _walk(root)]
    return pairs


def quoted_rm_command(remote_paths: list[str]) -> str:
    return "rm -f " + " ".join(shlex.quote(p) for p in remote_paths)


def quoted_mkdir_command(dirs: list[str]) -> str:
    return "mkdir -p " + " ".join(shlex.quote(d) for d in dirs)


def unique_parent_dirs(files: list[tuple[str, str]]) -> list[str]:
    return sorted({posixpath.dirname(remote) for _, remote in files})


def _sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _stat_key(path: str) -> tuple[float, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime, st.st_size)


class FileSyncManager:
    def __init__(
        self,
        get_files_fn: Callable[[], list[tuple[str, str]]],
        upload_fn: Callable[[str, str], None],
        delete_fn: Callable[[list[str]], None],
        sync_interval: float = 5.0,
        bulk_upload_fn: Callable[[list[tuple[str, str]]], None] | None = None,
        bulk_download_fn: Callable[[Path], None] | None = None,
    ):
        self._get_files = get_files_fn
        self._upload = upload_fn
        self._delete = delete_fn
        self._bulk_upload = bulk_upload_fn
        self._bulk_download = bulk_download_fn
        self._interval = sync_interval
        self._pushed: dict[str, tuple[float, int]] = {}  # remote -> (mtime, size)
        self._pushed_hashes: dict[str, str] = {}
        self._last_sync = 0.0
        self._lock = threading.Lock()

    def sync(self, *, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if not (force or os.environ.get(_FORCE_ENV)) and now - self._last_sync < self._interval:
                return
            try:
                self._sync_once()
            except Exception as exc:
                # Hermes's log text: plugins find failed syncs by these prefixes.
                logger.warning("file_sync: sync failed, rolled back state: %s", exc)
                return
            self._last_sync = now

    def _sync_once(self) -> None:
        current: dict[str, tuple[str, tuple[float, int]]] = {}
        for host, remote in self._get_files():
            key = _stat_key(host)
            if key is not None:
                current[remote] = (host, key)
        changed = [(host, remote) for remote, (host, key) in current.items() if self._pushed.get(remote) != key]
        removed = sorted(set(self._pushed) - set(current))
        if changed:
            if self._bulk_upload is not None:
                self._bulk_upload(changed)
            else:
                for host, remote in changed:
                    self._upload(host, remote)
        if removed:
            self._delete(removed)
        # Commit the new state only after every transfer succeeded.
        for host, remote in changed:
            self._pushed[remote] = current[remote][1]
            self._pushed_hashes[remote] = _sha256(host)
        for remote in removed:
            self._pushed.pop(remote, None)
            self._pushed_hashes.pop(remote, None)

    def sync_back(self, hermes_home: Path | None = None) -> None:
        if self._bulk_download is None or not self._pushed:
            return
        home = Path(hermes_home) if hermes_home else get_hermes_home()
        for attempt in range(_SYNC_BACK_MAX_RETRIES):
            try:
                home.mkdir(parents=True, exist_ok=True)
                with open(home / ".sync.lock", "w") as lock, self._lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    self._sync_back_once(home)
                return
            except Exception as exc:
                if attempt == _SYNC_BACK_MAX_RETRIES - 1:
                    logger.warning("sync_back: all %d attempts failed: %s", _SYNC_BACK_MAX_RETRIES, exc)
                    return
                delay = _BACKOFF[attempt]
                logger.warning("sync_back: attempt %d failed (%s), retrying in %ds", attempt + 1, exc, delay)
                time.sleep(delay)

    def _sync_back_once(self, home: Path) -> None:
        assert self._bulk_download is not None
        mapping = {remote: host for host, remote in self._get_files()}
        credentials = _credential_host_paths()
        with tempfile.TemporaryDirectory(prefix="hermes-sync-back-") as staging:
            archive = Path(staging, "remote.tar")
            self._bulk_download(archive)
            if archive.stat().st_size > _MAX_TAR_BYTES:
                logger.warning("sync_back: remote tar is over 2 GiB — skipping extraction")
                return
            out = Path(staging, "tree")
            with tarfile.open(archive) as tar:
                tar.extractall(out, filter="data")
            for staged in _walk(out):
                remote = "/" + staged.relative_to(out).as_posix()
                pushed_hash = self._pushed_hashes.get(remote)
                if pushed_hash is not None and _sha256(staged) == pushed_hash:
                    continue
                host = mapping.get(remote) or self._infer(remote, mapping, credentials)
                if host is None or _resolved(host) in credentials:
                    continue  # unknown place, or an upload-only credential file
                refused = _unsafe_target(host, home)
                if refused:
                    logger.warning("sync_back: not writing %s (from %s): %s", host, remote, refused)
                    continue
                if pushed_hash is not None and os.path.exists(host) and _sha256(host) != pushed_hash:
                    logger.warning("sync_back: conflict on %s: changed on both sides, the sandbox copy wins", remote)
                os.makedirs(os.path.dirname(host), exist_ok=True)
                shutil.copy2(staged, host)

    @staticmethod
    def _infer(remote: str, mapping: dict[str, str], credentials: set[str]) -> str | None:
        """A new sandbox file below the directory of a synced (non-credential) file
        maps to the same place below that file's host directory."""
        for known_remote, known_host in mapping.items():
            if _resolved(known_host) in credentials:
                continue
            remote_dir = posixpath.dirname(known_remote)
            if remote.startswith(remote_dir + "/"):
                return str(Path(known_host).parent) + remote[len(remote_dir) :]
        return None


def _unsafe_target(host: str, home: Path) -> str | None:
    """Why sync-back must not write ``host``, or None when it may."""
    if ".." in Path(host).parts:
        return "the path has '..' parts"
    try:
        target = Path(host).resolve()
        parent = Path(host).parent.resolve()
    except (OSError, RuntimeError):
        return "the path cannot be resolved"
    for base in {home, get_hermes_home()}:
        try:
            root = base.resolve()
        except (OSError, RuntimeError):
            root = base.absolute()
        for protected in ("skills", "plugins"):
            if target == root / protected or (root / protected) in target.parents:
                return f"it is inside {protected}/ of the Hermes home"
        if target in (root / "config.yaml", root / ".env"):
            return f"it is the Hermes home's {target.name}"
    if target.parent != parent and parent not in target.parents:
        return "a symlink leads it out of its directory"
    return None


def _resolved(path: str | Path) -> str:
    try:
        return str(Path(path).expanduser().resolve())
    except OSError:
        return str(Path(path).expanduser())

"""The encrypted archive operations: write (from a directory or a tar stream), verify, extract, open.

Writing streams the tar.gz straight into gpg, which writes the ciphertext to a partial file
(mode 0600, beside the destination) that is published under the final name only once gpg has
finished, without ever replacing an existing file.  No plaintext is written anywhere.

Reading decrypts with gpg into a pipe and validates member by member (``archives.members``).
``extract`` and ``open_payload`` read an archive twice: a first pass validates all of it,
including gpg's integrity check at its very end, before anything is written or sent; the second
pass writes (or streams) what the first one accepted, still checking every member.
"""

from __future__ import annotations

import gzip
import io
import os
import secrets
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from archives.errors import (
    ArchiveError,
    CorruptArchive,
    DestinationExists,
    MissingManifest,
    SourceError,
    TooLarge,
)
from archives.manifest import MAX_SIZE as MANIFEST_MAX
from archives.manifest import NAME as MANIFEST_NAME
from archives.manifest import Manifest
from archives.members import DEFAULT_LIMITS, PAYLOAD, Checker, Limits, describe_bytes, normalize
from archives.openpgp import Gpg, decrypting, encrypting
from archives.passphrase import Passphrase
from archives.tarball import (
    CHUNK,
    Extractor,
    ForwardReader,
    Progress,
    Readable,
    TarStreamWriter,
    Undecodable,
    forget_members,
    remove_tree,
    tree_size,
    walk_tree,
)

_T = TypeVar("_T")

COMPRESS_LEVEL = 3  # most of the size gain of 6 at about twice the speed on mixed data
_DRAIN_ON_ERROR = 4 * 1024 * 1024
_HEADER_ALLOWANCE = 1024**3  # decompressed bytes beyond the payload limit allowed for tar headers


@dataclass(frozen=True)
class ArchiveInfo:
    """What a pass over an archive found: its manifest, member count and payload bytes."""

    path: Path
    manifest: Manifest
    members: int
    payload_bytes: int


# -- writing ---------------------------------------------------------------------------------------


def write_tree(
    source: Path,
    out: Path,
    *,
    kind: str,
    name: str,
    passphrase: Passphrase,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    tools: dict[str, str] | None = None,
    settings: dict[str, Any] | None = None,
) -> ArchiveInfo:
    """Archive the directory ``source`` (its contents become ``data/``) into a new file ``out``;
    ``settings`` go into the manifest."""
    source = Path(source)
    total = tree_size(source) if progress is not None else None
    manifest = Manifest.new(kind, name, tools, settings)

    def produce(writer: TarStreamWriter, checker: Checker) -> None:
        for entry in walk_tree(source):
            checker.check(entry.info)
            if entry.path is None:
                writer.add(entry.info)
                continue
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:
                raise SourceError(f"{entry.path} cannot be read", exc.strerror or str(exc), "check its permissions")
            with open(fd, "rb") as data:
                writer.add(entry.info, data)

    return _write(out, manifest, produce, passphrase, limits, progress, total)


def write_stream(
    stream: IO[bytes],
    out: Path,
    *,
    kind: str,
    name: str,
    passphrase: Passphrase,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    tools: dict[str, str] | None = None,
) -> ArchiveInfo:
    """Archive a tar or tar.gz read from ``stream`` (e.g. ``tar -C DIR -cz .`` from a sandbox).

    The stream's members (``./x``, ``x``) become ``data/x``; its root entry (``.``, ``./``) becomes
    ``data``.  Every member passes the same checks as on reading, so an unsafe stream is refused
    here rather than at restore time.
    """
    manifest = Manifest.new(kind, name, tools)

    def produce(writer: TarStreamWriter, checker: Checker) -> None:
        try:
            source = tarfile.open(fileobj=stream, mode="r|*")  # noqa: SIM115 - closed below
        except tarfile.TarError as exc:
            raise SourceError("the tar stream cannot be read", str(exc), "send a tar or tar.gz stream")
        saw_root = False
        with source:
            while True:
                try:
                    member = source.next()
                except tarfile.TarError as exc:
                    raise SourceError("the tar stream is damaged", str(exc), "send a complete tar or tar.gz stream")
                if member is None:
                    break
                forget_members(source)
                info = _rerooted(member, saw_root)
                if info is None:
                    continue
                if info.name == PAYLOAD:
                    saw_root = True
                elif not saw_root:
                    checker.check(_root_dir())
                    writer.add(_root_dir())
                    saw_root = True
                checker.check(info)
                try:
                    data = source.extractfile(member) if info.isreg() else None
                    writer.add(info, data)
                except (tarfile.TarError, EOFError) as exc:
                    raise SourceError("the tar stream ended early", str(exc), "send a complete tar stream")

    return _write(out, manifest, produce, passphrase, limits, progress, None)


def _rerooted(member: tarfile.TarInfo, saw_root: bool) -> tarfile.TarInfo | None:
    """``member`` under ``data/`` with only what an archive keeps (type, mode, mtime, size, link)."""
    name = normalize(member.name)
    info = tarfile.TarInfo(PAYLOAD if not name else f"{PAYLOAD}/{name}" if not name.startswith("/") else name)
    if not name and (saw_root or not member.isdir()):
        return None
    info.type = tarfile.REGTYPE if member.isreg() else member.type
    info.mode, info.mtime, info.size = member.mode, int(member.mtime), member.size if member.isreg() else 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if member.islnk():
        target = normalize(member.linkname)
        info.linkname = target if target.startswith("/") else f"{PAYLOAD}/{target}"
    elif member.issym():
        info.linkname = member.linkname
    return info


def _root_dir() -> tarfile.TarInfo:
    info = tarfile.TarInfo(PAYLOAD)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info


def _write(
    out: Path,
    manifest: Manifest,
    produce: Callable[[TarStreamWriter, Checker], None],
    passphrase: Passphrase,
    limits: Limits,
    progress: Progress | None,
    total: int | None,
) -> ArchiveInfo:
    out = Path(out)
    _refuse_existing(out, "archive")
    if not out.parent.is_dir():
        raise SourceError(
            f"cannot write {out}", f"the directory {out.parent} does not exist", "create it or choose another --out"
        )
    partial = out.parent / f".{out.name}.{secrets.token_hex(4)}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    done = 0

    def on_data(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress("archive", done, total)

    try:
        checker = Checker(limits)
        with encrypting(fd, passphrase) as pipe:
            gz = gzip.GzipFile(filename="", fileobj=pipe, mode="wb", compresslevel=COMPRESS_LEVEL, mtime=0)
            writer = TarStreamWriter(gz)
            raw = manifest.to_bytes()
            writer.add(_manifest_info(raw), io.BytesIO(raw))
            writer.on_data = on_data
            produce(writer, checker)
            checker.finish()
            writer.close()
            gz.close()
        os.fsync(fd)
        _publish(partial, out)
    except BaseException:
        _unlink(partial)
        raise
    finally:
        os.close(fd)
    return ArchiveInfo(out, manifest, checker.members, checker.payload_bytes)


def _manifest_info(raw: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(MANIFEST_NAME)
    info.size, info.mode, info.mtime = len(raw), 0o644, 0
    return info


def _publish(partial: Path, out: Path) -> None:
    """Give ``partial`` the name ``out`` unless ``out`` exists (a hard link cannot replace a file)."""
    try:
        os.link(partial, out)
    except FileExistsError:
        raise DestinationExists(
            f"{out} already exists", "an archive is never overwritten", "choose another --out or move the file away"
        ) from None
    except OSError:  # a file system without hard links: rename after checking, the best it allows
        _refuse_existing(out, "archive")
        os.rename(partial, out)
    else:
        os.unlink(partial)
    dir_fd = os.open(out.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _refuse_existing(path: Path, what: str) -> None:
    if os.path.lexists(path):
        raise DestinationExists(
            f"{path} already exists",
            f"an {what} is never written over an existing one",
            "choose another path or move the existing one away",
        )


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# -- reading ---------------------------------------------------------------------------------------


class _Reading:
    """One decrypting pass: the manifest, then validated members with their data, then gpg's verdict."""

    def __init__(self, path: Path, passphrase: Passphrase, limits: Limits, progress: Progress | None, stage: str):
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise SourceError(f"cannot open {path}", exc.strerror or str(exc), "check the archive's path") from None
        self.size = os.fstat(self.fd).st_size
        self.progress, self.stage = progress, stage
        self.checker = Checker(limits)
        self.gpg: Gpg | None = None
        try:
            self.gpg = decrypting(self.fd, passphrase)
            assert self.gpg.process.stdout is not None
            self.stdout = self.gpg.process.stdout
            self.gz = gzip.GzipFile(fileobj=self.stdout, mode="rb")
            cap = limits.max_bytes + _HEADER_ALLOWANCE
            self.stream = ForwardReader(self.gz, cap, lambda: self._too_large(cap))
            self.tar = self._guard(lambda: tarfile.open(fileobj=self.stream, mode="r:"))  # noqa: SIM115
            self.manifest = self._read_manifest()
        except BaseException:
            self.close()
            raise

    def _too_large(self, cap: int) -> TooLarge:
        return TooLarge(
            "the archive is too large",
            f"it decompresses to more than {describe_bytes(cap)}",
            "use a smaller archive, or raise the limit if the archive is trusted",
        )

    def _guard(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except (Undecodable, tarfile.TarError, EOFError, zlib.error) as exc:
            raise self._diagnose(exc) from None

    def _diagnose(self, exc: BaseException) -> ArchiveError:
        """Why decoding failed: gpg's verdict when it failed (wrong passphrase, truncated...), else ours."""
        assert self.gpg is not None
        left = _DRAIN_ON_ERROR
        ended = False
        while left > 0:
            try:
                chunk = self.stdout.read(min(CHUNK, left))
            except OSError:
                break
            if not chunk:
                ended = True
                break
            left -= len(chunk)
        if ended and self.gpg.wait() != 0:
            return self.gpg.decrypt_failure()
        return CorruptArchive(
            "the archive's contents are not a valid gzipped tar",
            str(exc) or type(exc).__name__,
            "use an archive written by these tools or by tar -cz (then gpg --symmetric)",
        )

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.stage, os.lseek(self.fd, 0, os.SEEK_CUR), self.size)

    def _read_manifest(self) -> Manifest:
        first = self._guard(self._next)
        if first is None or normalize(first.name) != MANIFEST_NAME or not first.isreg():
            shown = "nothing" if first is None else repr(first.name)
            raise MissingManifest(
                "the archive has no manifest",
                f"its first member must be manifest.json, and is {shown}",
                "put manifest.json first when building one by hand: tar -czf X manifest.json data",
            )
        if first.size > MANIFEST_MAX:
            raise CorruptArchive("the archive's manifest is too large", f"{first.size} bytes", "use an intact archive")
        data = self.tar.extractfile(first)
        assert data is not None
        return Manifest.from_bytes(self._guard(lambda: data.read()))

    def _next(self) -> tarfile.TarInfo | None:
        member = self.tar.next()
        forget_members(self.tar)
        return member

    def members(self) -> Iterator[tuple[str, tarfile.TarInfo, Readable | None]]:
        """(payload-relative path, header, data for a regular file) for each member, validated."""
        while True:
            member = self._guard(self._next)
            self._report()
            if member is None:
                return
            rel = self.checker.check(member)
            data = self.tar.extractfile(member) if member.isreg() else None
            yield rel, member, _Guarded(data, self) if data is not None else None

    def finish(self) -> None:
        """Read to the end and require gpg's success (its integrity check covers the last byte); then
        judge the links against the whole tree (a damaged archive is reported as such first)."""
        assert self.gpg is not None
        self._guard(self.stream.drain)
        if self.gpg.wait() != 0:
            raise self.gpg.decrypt_failure()
        self._report()
        self.checker.finish()

    def info(self) -> ArchiveInfo:
        return ArchiveInfo(self.path, self.manifest, self.checker.members, self.checker.payload_bytes)

    def close(self) -> None:
        if self.gpg is not None:
            self.gpg.close()
        os.close(self.fd)


class _Guarded(io.RawIOBase):
    """A member's data whose decoding failures are explained like the rest of the stream's."""

    def __init__(self, data: Readable, reading: _Reading) -> None:
        super().__init__()
        self.data, self.reading = data, reading

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self.reading._guard(lambda: self.data.read(CHUNK if size is None or size < 0 else size))


@contextmanager
def _reading(
    path: Path, passphrase: Passphrase, limits: Limits, progress: Progress | None, stage: str, kind: str | None
) -> Iterator[_Reading]:
    reading = _Reading(Path(path), passphrase, limits, progress, stage)
    try:
        reading.manifest.require_kind(kind)
        yield reading
    finally:
        reading.close()


def verify(
    archive: Path,
    passphrase: Passphrase,
    *,
    kind: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    on_member: Callable[[str, tarfile.TarInfo], None] | None = None,
) -> ArchiveInfo:
    """Decrypt and validate all of ``archive`` without writing anything; ``on_member`` lists it."""
    with _reading(archive, passphrase, limits, progress, "verify", kind) as reading:
        for rel, member, data in reading.members():
            if on_member is not None:
                on_member(rel, member)
            if data is not None:
                while data.read(CHUNK):
                    pass
        reading.finish()
        return reading.info()


def extract(
    archive: Path,
    dest: Path,
    passphrase: Passphrase,
    *,
    kind: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    with_manifest: bool = False,
    validated: ArchiveInfo | None = None,
) -> ArchiveInfo:
    """Validate ``archive`` whole, then write its payload into ``dest``, failing at the first problem.

    ``dest`` must not exist (it is created, mode 0700) or be an empty directory.  The payload's
    root becomes ``dest`` itself; with ``with_manifest``, ``dest`` gets ``manifest.json`` and the
    payload under ``dest/data`` instead, as in the archive.  On any failure or interruption,
    everything written is removed (``dest`` too when this call created it).  ``validated``, the
    result of an earlier ``verify`` of the same file, stands for the validating pass (the writing
    pass still checks every member and that the manifest is the same).
    """
    dest = Path(dest)
    first = validated or verify(archive, passphrase, kind=kind, limits=limits, progress=_staged(progress, "validate"))
    created = _prepare_dest(dest)
    try:
        root = dest / PAYLOAD if with_manifest else dest
        if with_manifest:
            fd = os.open(dest / MANIFEST_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with open(fd, "wb") as out:
                out.write(first.manifest.to_bytes())
            os.mkdir(root, 0o700)
        extractor = Extractor(root)
        with _reading(archive, passphrase, limits, _staged(progress, "extract"), "extract", kind) as reading:
            _same_archive(first, reading)
            for rel, member, data in reading.members():
                extractor.add(rel, member, data)
            reading.finish()
            extractor.finish()
            return reading.info()
    except BaseException:
        if created:
            remove_tree(dest)
        else:
            for child in list(dest.iterdir()):
                remove_tree(child)
        raise


def _staged(progress: Progress | None, stage: str) -> Progress | None:
    if progress is None:
        return None
    return lambda _stage, done, total: progress(stage, done, total)


def _prepare_dest(dest: Path) -> bool:
    """Create ``dest`` (True) or accept it as an existing empty directory (False)."""
    try:
        os.mkdir(dest, 0o700)
        return True
    except FileExistsError:
        pass
    except FileNotFoundError:
        raise SourceError(
            f"cannot extract into {dest}", f"the directory {dest.parent} does not exist", "create it first"
        ) from None
    if dest.is_symlink() or not dest.is_dir() or any(dest.iterdir()):
        raise DestinationExists(
            f"{dest} already exists",
            "extraction never writes over existing files",
            "choose a new directory or move the existing one away",
        )
    return False


def _same_archive(first: ArchiveInfo, reading: _Reading) -> None:
    if reading.manifest != first.manifest:
        raise CorruptArchive(
            f"{first.path} changed while it was being read",
            "the second pass found another manifest than the validating pass",
            "leave the archive alone while it is restored, then run again",
        )


class Payload:
    """A validated archive's payload as a fresh tar.gz stream (members relative to the payload root).

    ``chunks()`` yields the compressed bytes; ``read(n)`` serves them as a file.  Only obtained from
    ``open_payload``, after the whole archive has passed validation.
    """

    def __init__(self, reading: _Reading, first: ArchiveInfo, level: int) -> None:
        self.manifest = first.manifest
        self.info = first
        self._reading, self._level = reading, level
        self._iter: Iterator[bytes] | None = None
        self._buffer = b""
        self._offset = 0

    def chunks(self) -> Iterator[bytes]:
        compressor = zlib.compressobj(self._level, zlib.DEFLATED, 31)
        sink = _Sink(compressor)
        writer = TarStreamWriter(sink)
        for rel, member, data in self._reading.members():
            if not rel:
                continue
            info = _unrooted(member, rel)
            writer.header(info)
            yield from sink.take()
            if data is not None:
                left = member.size
                while left:
                    chunk = data.read(min(CHUNK, left))
                    if not chunk:
                        raise CorruptArchive("the archive ended early", member.name, "use an intact archive")
                    writer.data(chunk)
                    left -= len(chunk)
                    yield from sink.take()
            writer.end(info)
        self._reading.finish()
        writer.close()
        sink.buffer += compressor.flush()
        yield from sink.take()

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes of the tar.gz (all that is left with -1); b"" at its end."""
        if self._iter is None:
            self._iter = self.chunks()
        parts: list[bytes] = []
        wanted = size
        while wanted != 0:
            if self._offset >= len(self._buffer):
                chunk = next(self._iter, None)
                if chunk is None:
                    break
                self._buffer, self._offset = chunk, 0
            end = len(self._buffer) if wanted < 0 else min(len(self._buffer), self._offset + wanted)
            parts.append(self._buffer[self._offset : end])
            if wanted > 0:
                wanted -= end - self._offset
            self._offset = end
        return b"".join(parts)


class _Sink:
    def __init__(self, compressor: zlib._Compress) -> None:
        self.compressor = compressor
        self.buffer = b""

    def write(self, data: bytes) -> None:
        self.buffer += self.compressor.compress(data)

    def take(self) -> Iterator[bytes]:
        if self.buffer:
            out, self.buffer = self.buffer, b""
            yield out


def _unrooted(member: tarfile.TarInfo, rel: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(rel)
    info.type, info.mode, info.mtime = member.type, member.mode, member.mtime
    info.size = member.size if member.isreg() else 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if member.islnk():
        info.linkname = "/".join(normalize(member.linkname).split("/")[1:])
    elif member.issym():
        info.linkname = member.linkname
    return info


@contextmanager
def open_payload(
    archive: Path,
    passphrase: Passphrase,
    *,
    kind: str | None = "workspace",
    limits: Limits = DEFAULT_LIMITS,
    progress: Progress | None = None,
    level: int = COMPRESS_LEVEL,
) -> Iterator[Payload]:
    """Validate ``archive`` whole, then give its payload as a tar.gz stream to send elsewhere.

    Raises (from ``chunks``/``read``) only if the file changes between the two passes.
    """
    first = verify(archive, passphrase, kind=kind, limits=limits, progress=_staged(progress, "validate"))
    with _reading(archive, passphrase, limits, _staged(progress, "send"), "send", kind) as reading:
        _same_archive(first, reading)
        yield Payload(reading, first, level)

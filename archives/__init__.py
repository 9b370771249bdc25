"""Encrypted archives of a directory tree: one format for a box's /data and a Hermes workspace.

An archive is an OpenPGP symmetric message (AES-256, passphrase-derived key, integrity check),
made and opened by GnuPG's ``gpg`` binary, of a gzipped tar holding ``manifest.json`` first
(``archives.manifest``) and then the tree under ``data/``.  Plain GnuPG and tar read it
(``gpg --decrypt X | tar -tz``) and an archive built by them loads.  Everything streams: memory
stays bounded for trees of many GiB.

Operations (``archives.encrypted``):
- ``write_tree(source_dir, out, kind=, name=, passphrase=)``: archive a directory;
- ``write_stream(tar_or_targz_stream, out, kind=, name=, passphrase=)``: archive a tar stream
  (e.g. one coming out of a remote sandbox);
- ``verify(archive, passphrase)``: decrypt and validate all of it, writing nothing;
- ``extract(archive, dest, passphrase)``: validate, then restore into a new (or empty) directory;
- ``remove_tree(path)``: remove an extracted tree whatever modes its directories have;
- ``open_payload(archive, passphrase)``: validate, then give the tree as a tar.gz stream whose
  members are relative to the tree's root (to send into a sandbox).
Each takes ``limits`` (``Limits``: total bytes and member count, by default 32 GiB and two
million) and ``progress`` (``progress(stage, done, total)``).  Passphrases are ``Passphrase``
objects (``archives.passphrase``), which never show their value.

Every refusal is an ``ArchiveError`` with ``what``, ``why`` and ``fix``:

    ArchiveError
    ├── PassphraseUnavailable   no BOX_PASSPHRASE and no terminal; empty or multi-line passphrase
    ├── GpgUnavailable          gpg missing or not runnable
    ├── GpgFailed               gpg failed while encrypting (disk full, ...)
    ├── WrongPassphrase         the passphrase does not open the archive
    ├── CorruptArchive          not OpenPGP, truncated, altered, not a gzipped tar, inconsistent
    ├── ManifestError
    │   ├── MissingManifest     the first member is not manifest.json
    │   ├── UnknownFormat       not JSON, incomplete, or a format other than 1
    │   └── WrongKind           a workspace where a box was expected, or the reverse
    ├── UnsafeMember            (.member names it)
    │   ├── AbsolutePath        /etc/passwd
    │   ├── ParentReference     data/../escape
    │   ├── EscapingLink        a symbolic or hard link pointing outside data/ (or absolute)
    │   ├── SpecialFile         a device node or FIFO
    │   └── UnexpectedMember    outside data/, duplicated, through a link, unsupported type
    ├── TooLarge                payload bytes or member count above the limits
    ├── DestinationExists       the archive file or extraction directory exists already
    └── SourceError             the tree or stream to archive is unreadable or changed; a missing path
"""

from archives.encrypted import ArchiveInfo, Payload, extract, open_payload, verify, write_stream, write_tree
from archives.errors import (
    AbsolutePath,
    ArchiveError,
    CorruptArchive,
    DestinationExists,
    EscapingLink,
    GpgFailed,
    GpgUnavailable,
    ManifestError,
    MissingManifest,
    ParentReference,
    PassphraseUnavailable,
    SourceError,
    SpecialFile,
    TooLarge,
    UnexpectedMember,
    UnknownFormat,
    UnsafeMember,
    WrongKind,
    WrongPassphrase,
)
from archives.manifest import FORMAT, KINDS, Manifest, gpg_version
from archives.members import DEFAULT_LIMITS, Limits
from archives.passphrase import ENV_VAR, Passphrase
from archives.tarball import Progress, remove_tree

__all__ = [
    "DEFAULT_LIMITS",
    "ENV_VAR",
    "FORMAT",
    "KINDS",
    "AbsolutePath",
    "ArchiveError",
    "ArchiveInfo",
    "CorruptArchive",
    "DestinationExists",
    "EscapingLink",
    "GpgFailed",
    "GpgUnavailable",
    "Limits",
    "Manifest",
    "ManifestError",
    "MissingManifest",
    "ParentReference",
    "Passphrase",
    "PassphraseUnavailable",
    "Payload",
    "Progress",
    "SourceError",
    "SpecialFile",
    "TooLarge",
    "UnexpectedMember",
    "UnknownFormat",
    "UnsafeMember",
    "WrongKind",
    "WrongPassphrase",
    "extract",
    "gpg_version",
    "open_payload",
    "remove_tree",
    "verify",
    "write_stream",
    "write_tree",
]

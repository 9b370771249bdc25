"""Every way an archive operation can be refused, each with what happened, why, and the fix.

The shape matches the box manager's errors (``what``, ``why``, ``fix``) so a command line prints
them the same way.  No message ever carries a passphrase: the passphrase never reaches the code
that builds one.
"""

from __future__ import annotations


class ArchiveError(Exception):
    """An archive could not be written, opened, validated or extracted."""

    def __init__(self, what: str, why: str, fix: str) -> None:
        self.what, self.why, self.fix = what, why, fix
        super().__init__(f"{what}: {why}; {fix}")


class PassphraseUnavailable(ArchiveError):
    """No passphrase: the variable is unset or empty and there is no terminal to prompt on."""


class GpgUnavailable(ArchiveError):
    """The ``gpg`` binary is missing or could not be run."""


class GpgFailed(ArchiveError):
    """gpg failed while encrypting (disk full, killed, ...); its own message is in ``why``."""


class WrongPassphrase(ArchiveError):
    """The passphrase does not open this archive."""


class CorruptArchive(ArchiveError):
    """Not an OpenPGP file, truncated, altered, or not a gzipped tar inside."""


class ManifestError(ArchiveError):
    """The manifest (``manifest.json``, the first member) is missing or cannot be used."""


class MissingManifest(ManifestError):
    """The first member is not ``manifest.json``."""


class UnknownFormat(ManifestError):
    """The manifest is not JSON, or names a format version this code does not read."""


class WrongKind(ManifestError):
    """The archive holds another kind of tree (a workspace where a box was expected, ...)."""


class UnsafeMember(ArchiveError):
    """A member that extraction would have to refuse; ``member`` names it as the archive does."""

    def __init__(self, member: str, what: str, why: str, fix: str) -> None:
        self.member = member
        super().__init__(what, why, fix)


class AbsolutePath(UnsafeMember):
    """A member name starting with ``/``."""


class ParentReference(UnsafeMember):
    """A member name with a ``..`` component."""


class EscapingLink(UnsafeMember):
    """A symbolic or hard link whose target is absolute or leaves the archive's root."""


class SpecialFile(UnsafeMember):
    """A device node or a FIFO (a tar has no business restoring either)."""


class UnexpectedMember(UnsafeMember):
    """A member outside ``data/``, a duplicate, or one whose path goes through a link."""


class TooLarge(ArchiveError):
    """The payload's total size (or member count) is above the stated limit."""


class DestinationExists(ArchiveError):
    """The archive file or extraction directory already exists; nothing is ever overwritten."""


class SourceError(ArchiveError):
    """The tree or stream being archived could not be read, or changed while being read."""

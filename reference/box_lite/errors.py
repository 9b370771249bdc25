"""Every way a Box Lite operation can be refused or fail: what happened, why, and the fix.

The command line prints ``error: what — fix`` (and ``why`` where it helps)
and exits with ``exit_code``: 2 for bad input (a name, a setting, a box that
exists or does not), 1 for an operation that failed.  The shape matches
``archives.errors.ArchiveError`` so both print alike.  No message carries a
passphrase or another secret: the code building one never holds it.
"""

from __future__ import annotations


class BoxError(Exception):
    """A box operation was refused or failed."""

    exit_code = 1

    def __init__(self, what: str, why: str = "", fix: str = "") -> None:
        self.what, self.why, self.fix = what, why, fix
        text = what + (f": {why}" if why else "") + (f"; {fix}" if fix else "")
        super().__init__(text)

    def __reduce__(self) -> tuple[type[BoxError], tuple[str, str, str]]:
        return type(self), (self.what, self.why, self.fix)


class BadInput(BoxError):
    """The request itself is wrong (a box name, a setting, an argument)."""

    exit_code = 2


class BoxNotFound(BadInput):
    """No box of that name (neither registered nor on disk)."""


class BoxExists(BadInput):
    """A box, or a directory that is not this call's, already has that name; it is left as it is."""


class BoxLocked(BoxError):
    """Another process holds the box's lock (the message names its PID)."""


class BoxBroken(BoxError):
    """The box is in no usable state: its daemon died, its directory is missing, or the registry disagrees."""


class BoxNotRunning(BoxError):
    """The operation needs a running box and this one is stopped."""


class BoxStartFailed(BoxError):
    """The box's daemon could not start the box (its log says why)."""


class ControlError(BoxError):
    """The box's daemon could not be reached, or refused a request."""


class BoxInterrupted(BoxError):
    """A signal (HUP, INT, TERM) stopped the operation; what it had made was cleaned up."""

    def __init__(self, signum: int, what: str = "", why: str = "", fix: str = "") -> None:
        import signal

        self.signum = signum
        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
        super().__init__(what or f"interrupted by {name}", why, fix)
        self.exit_code = 128 + signum

    def __reduce__(self) -> tuple[type[BoxInterrupted], tuple[int, str, str, str]]:  # type: ignore[override]  # the signal comes first
        return type(self), (self.signum, self.what, self.why, self.fix)


class ArchiveRefused(BadInput):
    """What an archive operation was given was refused (an archive that fails validation, before any
    box is made; a /data save cannot archive; no usable passphrase); nothing was left behind."""

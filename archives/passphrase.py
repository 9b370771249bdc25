"""The passphrase of an archive: held so that printing, logging or pickling it shows nothing.

It comes from an environment variable (``BOX_PASSPHRASE`` by default, for unattended use) or
from a prompt on the controlling terminal with echo off.  Without either, the caller gets a
``PassphraseUnavailable`` saying how to provide one; it never falls back to reading an echoed
line from stdin.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Mapping
from typing import NoReturn

from archives.errors import PassphraseUnavailable

ENV_VAR = "BOX_PASSPHRASE"


class Passphrase:
    """A secret string: ``str``/``repr`` show ``Passphrase(***)``; ``reveal()`` gives the bytes for gpg."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str) -> None:
        if not secret:
            raise PassphraseUnavailable(
                "the passphrase is empty", "an archive needs a non-empty passphrase", "set a non-empty passphrase"
            )
        if "\n" in secret or "\r" in secret or "\0" in secret:
            # gpg reads the passphrase from its descriptor up to the first newline.
            raise PassphraseUnavailable(
                "the passphrase cannot be used",
                "it contains a line break or NUL character, which gpg would cut it at",
                "choose a passphrase on one line",
            )
        self._secret = secret

    def reveal(self) -> bytes:
        """The UTF-8 bytes, for writing to gpg's passphrase pipe and nowhere else."""
        return self._secret.encode("utf-8")

    def __repr__(self) -> str:
        return "Passphrase(***)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Passphrase cannot be pickled or copied out of this process")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Passphrase) and other._secret == self._secret

    def __hash__(self) -> int:
        return hash((Passphrase, self._secret))

    @classmethod
    def from_env(cls, var: str = ENV_VAR, environ: Mapping[str, str] | None = None) -> Passphrase | None:
        """The passphrase in ``var``; None when the variable is unset or empty."""
        value = (os.environ if environ is None else environ).get(var, "")
        return cls(value) if value else None

    @classmethod
    def prompt(
        cls,
        prompt: str = "Passphrase: ",
        *,
        confirm: bool = False,
        var: str = ENV_VAR,
        ask: Callable[[str], str] | None = None,
    ) -> Passphrase:
        """Ask on the controlling terminal without echo (twice with ``confirm``, for a new archive)."""
        if ask is None:
            if not _has_terminal():
                raise PassphraseUnavailable(
                    "no passphrase",
                    f"{var} is not set and there is no terminal to ask on",
                    f"set {var} in the environment for unattended use, or run on a terminal",
                )
            ask = getpass.getpass
        first = ask(prompt)
        if confirm and ask("Repeat the passphrase: ") != first:
            raise PassphraseUnavailable(
                "the passphrases differ", "the second entry did not match the first", "type the same passphrase twice"
            )
        return cls(first)

    @classmethod
    def obtain(cls, *, confirm: bool = False, var: str = ENV_VAR, prompt: str = "Passphrase: ") -> Passphrase:
        """``var`` when set, else a prompt on the terminal, else a clear ``PassphraseUnavailable``."""
        found = cls.from_env(var)
        return found if found is not None else cls.prompt(prompt, confirm=confirm, var=var)


def _has_terminal() -> bool:
    """True when /dev/tty opens: getpass would otherwise read an echoed line from stdin."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True

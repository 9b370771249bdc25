"""OpenPGP symmetric encryption (AES-256) of a byte stream through the ``gpg`` binary.

Each run of gpg gets:
- the passphrase on a pipe of its own (``--passphrase-fd N``, written once and closed), so it is
  never in gpg's argv (``/proc/PID/cmdline``) nor in its environment (``/proc/PID/environ``),
  which holds only PATH and LC_ALL;
- a private, empty ``--homedir`` (mode 0700, removed afterwards), never the user's ~/.gnupg;
  its name carries the pid of the process that made it, so one left by a process killed outright
  is removed by the next run that finds it (``sweep_stale_homes``);
  ``--no-autostart`` keeps gpg-agent from being started there (no process outlives a run: the
  S2K count is given so encryption does not ask an agent for a calibrated one);
- ``--batch --pinentry-mode loopback``: never a pinentry window or a terminal prompt;
- its status lines written to a file in that homedir, from which failures are classified
  (a wrong passphrase, data that is not OpenPGP, truncated or altered data).

Data never touches the homedir: plaintext goes through gpg's stdin or stdout pipe, ciphertext
comes from or goes to a descriptor the caller opened.  Archives are ordinary
``gpg --symmetric --cipher-algo AES256`` messages (with the integrity check), so GnuPG opens
them and opens GnuPG's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from archives.errors import CorruptArchive, GpgFailed, GpgUnavailable, WrongPassphrase
from archives.passphrase import Passphrase

# The strongest iterated-and-salted S2K count OpenPGP can state (about 0.3 s of SHA-512 per run).
S2K_COUNT = 65011712
_WAIT_SECONDS = 300


HOME_PREFIX = "hermes-gpg-"


def sweep_stale_homes(folder: str | None = None) -> list[Path]:
    """Remove the gpg homedirs in ``folder`` (the temp dir) whose maker is gone (killed before it could
    clean up), and return them.  Only this user's, and only ``hermes-gpg-<pid>-*`` names whose pid
    no longer runs: a live maker's homedir (or one whose pid was reused) is left alone."""
    folder = folder or tempfile.gettempdir()
    swept: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return swept
    for entry in entries:
        if not entry.name.startswith(HOME_PREFIX):
            continue
        pid_text = entry.name[len(HOME_PREFIX) :].split("-", 1)[0]
        try:
            if not pid_text.isdigit() or not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
            swept.append(Path(entry.path))
        except OSError:
            continue
    return swept


class Gpg:
    """One gpg process: started with the passphrase on its own pipe, waited for and cleaned up by ``close``."""

    def __init__(self, args: list[str], passphrase: Passphrase, *, stdin: int | None, stdout: int | None) -> None:
        gpg = shutil.which("gpg")
        if gpg is None:
            raise GpgUnavailable(
                "gpg was not found",
                "archives are OpenPGP messages made and opened by GnuPG's gpg",
                "install GnuPG (Debian: apt-get install gnupg)",
            )
        sweep_stale_homes()
        self.home = Path(tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{os.getpid()}-"))
        self.status_path = self.home / "status"
        self._stderr = open(self.home / "stderr", "w+b")  # noqa: SIM115 - closed in close()
        read_end, write_end = os.pipe()
        try:
            argv = [
                gpg,
                "--homedir",
                str(self.home),
                "--no-options",
                "--no-keyring",
                "--no-autostart",
                "--no-symkey-cache",
                "--batch",
                "--no-tty",
                "--pinentry-mode",
                "loopback",
                "--passphrase-fd",
                str(read_end),
                "--status-file",
                str(self.status_path),
                *args,
            ]
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
            try:
                self.process: subprocess.Popen[bytes] = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE if stdin is None else stdin,
                    stdout=subprocess.PIPE if stdout is None else stdout,
                    stderr=self._stderr,
                    pass_fds=(read_end,),
                    env=env,
                    close_fds=True,
                )
            except OSError as exc:
                raise GpgUnavailable("gpg could not be started", str(exc), "check that gpg runs: gpg --version")
            os.close(read_end)
            read_end = -1
            with suppress(BrokenPipeError):
                os.write(write_end, passphrase.reveal() + b"\n")
        except BaseException:
            if read_end >= 0:
                os.close(read_end)
            os.close(write_end)
            self._remove_home()
            raise
        os.close(write_end)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self) -> int:
        """gpg's exit status, killing it if it does not finish within a few minutes."""
        try:
            return self.process.wait(_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.wait()

    def kill(self) -> None:
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                self.process.kill()
        self.process.wait()

    def status(self) -> str:
        try:
            return self.status_path.read_text(errors="replace")
        except OSError:
            return ""

    def stderr_text(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stderr_tail(self) -> str:
        lines = [line.strip() for line in self.stderr_text().splitlines() if line.strip()]
        return lines[-1] if lines else "no message"

    def decrypt_failure(self) -> CorruptArchive | WrongPassphrase:
        """What a failed ``--decrypt`` means, from gpg's status lines and messages."""
        status, messages = self.status(), self.stderr_text()
        fix = "check the file (its size against the original, a complete download or copy) or use another backup"
        if "BAD_PASSPHRASE" in status or "Bad session key" in messages:
            return WrongPassphrase(
                "wrong passphrase",
                "gpg could not decrypt the archive's session key with the passphrase given",
                "give the passphrase the archive was saved with (BOX_PASSPHRASE or the prompt)",
            )
        if any(sign in messages for sign in ("read error", "problem reading source", "unexpected EOF")):
            return CorruptArchive("the archive is truncated", "gpg reached its end in the middle of the data", fix)
        if "NODATA" in status:
            return CorruptArchive("the file is not an encrypted archive", "gpg found no OpenPGP data in it", fix)
        if "NO_SECKEY" in status or "ENC_TO" in status:
            return CorruptArchive(
                "the archive is encrypted to a key, not with a passphrase",
                "archives are symmetric (gpg --symmetric) messages",
                "decrypt it with its key and encrypt it again with gpg --symmetric --cipher-algo AES256",
            )
        if "BADMDC" in status:
            return CorruptArchive(
                "the archive is damaged or was altered", "its OpenPGP integrity check (MDC) failed", fix
            )
        return CorruptArchive("the archive is damaged", f"gpg: {self.stderr_tail()}", fix)

    def close(self) -> None:
        """Kill gpg if still running and remove its homedir (status and messages only, never data)."""
        self.kill()
        self._stderr.close()
        self._remove_home()

    def _remove_home(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


@contextmanager
def encrypting(out_fd: int, passphrase: Passphrase) -> Iterator[IO[bytes]]:
    """A writable stream whose bytes gpg encrypts into ``out_fd`` (an open, writable file).

    Leaving the block normally closes the stream and waits for gpg, raising ``GpgFailed`` if it
    failed; leaving it with an exception kills gpg.  Either way nothing of gpg remains.
    """
    args = ["--symmetric", "--cipher-algo", "AES256", "--s2k-mode", "3", "--s2k-digest-algo", "SHA512"]
    args += ["--s2k-count", str(S2K_COUNT), "--compress-algo", "none", "--output", "-"]
    gpg = Gpg(args, passphrase, stdin=None, stdout=out_fd)
    assert gpg.process.stdin is not None
    try:
        try:
            yield gpg.process.stdin
            gpg.process.stdin.close()
        except BrokenPipeError:
            raise _encrypt_failure(gpg) from None
        if gpg.wait() != 0:
            raise _encrypt_failure(gpg)
    finally:
        with suppress(OSError):
            gpg.process.stdin.close()
        gpg.close()


def _encrypt_failure(gpg: Gpg) -> GpgFailed:
    gpg.wait()
    return GpgFailed(
        "gpg could not encrypt the archive",
        f"gpg: {gpg.stderr_tail()}",
        "check free space and permissions where the archive is written, then run again",
    )


def decrypting(in_fd: int, passphrase: Passphrase) -> Gpg:
    """A gpg ``--decrypt`` reading the ciphertext from ``in_fd``; plaintext on ``.process.stdout``.

    The caller reads, then ``wait()``s and checks the status (``decrypt_failure``), and always
    ``close()``s.  Plaintext that gpg writes before it finds the data truncated or altered is
    only trustworthy once gpg has exited with 0.
    """
    return Gpg(["--decrypt"], passphrase, stdin=in_fd, stdout=None)

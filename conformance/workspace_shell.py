"""Talking to a sandbox for a workspace transfer through the contract's ``execute`` only.

Every step is one ``execute()`` of a bash snippet run in a subshell (so neither its ``cd`` nor its
variables reach the session Hermes keeps), whose payload is printed between two random fences:
login-shell noise before it and the step's stderr (sent to a file, printed after the closing
fence) never mix with the payload.  The closing fence carries the step's own exit status.

Bytes travel as base64 text: out of the sandbox in chunks read with ``tail -c +OFF | head -c N``,
into it as ``stdin_data`` decoded by ``base64 -d``.  Every chunk is checked by its byte count and
SHA-256 on the other side; a chunk that came back short or altered (a backend's output cap, a
command-size limit) is asked for again at half the size, down to ``MIN_CHUNK``, so a cap can make
a transfer slower but never silently shorter.  Chunks start at ``START_CHUNK``, double after each
intact one up to ``MAX_CHUNK`` and, once one has failed, stay below the size that failed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from conformance.errors import KitError

START_CHUNK = 1024 * 1024  # raw bytes per execute() to start with: 1.4 MB of base64, under a 2 MB output cap
MAX_CHUNK = 8 * 1024 * 1024  # fewer, larger calls: a call costs about 0.1 s on the fakes whatever its size
MIN_CHUNK = 4 * 1024
STEP_TIMEOUT = 600  # seconds for one step (packing or unpacking a large tree runs in one)
REQUIRED_TOOLS = ("tar", "base64", "sha256sum", "find", "xargs", "mktemp", "tail", "head", "wc")


class WorkspaceError(KitError, RuntimeError):
    """A workspace could not be saved or loaded: what failed, why, and what to do."""

    fix = "see docs/workspace-transfer.md"


class SandboxToolsMissing(WorkspaceError):
    fix = "use a sandbox image with GNU tar, findutils and coreutils (Debian and Ubuntu images have them)"


class TransferFailed(WorkspaceError):
    fix = "rerun the command; if it fails again, rerun with --debug and check the sandbox (disk space, its service)"


class ChunkSize:
    """Bytes per execute() in one direction: grows while chunks arrive intact, shrinks when one does not."""

    def __init__(self) -> None:
        self.size = START_CHUNK
        self.ceiling = MAX_CHUNK

    def grow(self) -> None:
        self.size = min(self.size * 2, self.ceiling)

    def shrink(self) -> bool:
        """Halve (and never grow back past the size that failed); False when already at MIN_CHUNK."""
        if self.size <= MIN_CHUNK:
            return False
        self.size = max(MIN_CHUNK, self.size // 2)
        self.ceiling = self.size
        return True


@dataclass
class Reply:
    rc: int
    out: str  # what the step printed between the fences
    err: str  # its stderr (the first 2000 bytes)
    complete: bool  # both fences seen and the backend reported no truncation
    code: int | None = None  # execute()'s own returncode (124: timed out, 130: interrupted)


@dataclass
class Probe:
    tools: set[str]
    gnu_tar: bool
    gnu_find: bool
    home: str
    base: str  # the environment's working directory
    tmp: str  # a fresh temp directory in the sandbox, for this transfer

    def missing(self, *optional: str) -> list[str]:
        needed = [t for t in REQUIRED_TOOLS if t not in self.tools]
        if "tar" in self.tools and not self.gnu_tar:
            needed.append("GNU tar (this tar is not GNU's)")
        if "find" in self.tools and not self.gnu_find:
            needed.append("GNU find (this find is not GNU's)")
        return needed + [t for t in optional if t not in self.tools]


def q(text: str) -> str:
    return shlex.quote(text)


class SandboxShell:
    """One environment, driven only through ``env.execute(command, timeout=, stdin_data=)``."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.calls = 0
        self.bytes_in = 0  # payload bytes read out of the sandbox
        self.bytes_out = 0  # payload bytes written into it
        self.retries = 0  # chunks asked for again at a smaller size
        self.read_chunk = ChunkSize()  # out of the sandbox (bounded by the backend's output)
        self.write_chunk = ChunkSize()  # into it (bounded by what stdin_data or a command may carry)

    # -- one step ---------------------------------------------------------------------------
    def step(self, body: str, *, stdin: str | None = None, timeout: int = STEP_TIMEOUT) -> Reply:
        tag = secrets.token_hex(8)
        start, end = f"__HBK_WS_{tag}_START__", f"__HBK_WS_{tag}_END__"
        script = (
            "(\n"
            "__hbk_err=$(mktemp 2>/dev/null) || __hbk_err=/dev/null\n"
            f"printf '%s\\n' {start}\n"
            f'( {body}\n) 2>"$__hbk_err"\n'
            "__hbk_rc=$?\n"
            f"printf '\\n%s %s\\n' {end} \"$__hbk_rc\"\n"
            '[ "$__hbk_err" = /dev/null ] || { head -c 2000 "$__hbk_err"; rm -f "$__hbk_err"; }\n'
            "exit $__hbk_rc\n"
            ")"
        )
        self.calls += 1
        try:
            result = self.env.execute(script, timeout=timeout, stdin_data=stdin)
        except Exception as exc:
            raise TransferFailed(
                "the backend's execute() failed during the transfer", why=f"{type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(result, dict):
            raise TransferFailed(f"the backend's execute() returned {type(result).__name__}, not a result dict")
        output = str(result.get("output") or "")
        code = result.get("returncode")
        opened = output.find(start + "\n")
        closed = output.rfind("\n" + end + " ")
        if opened < 0 or closed < opened:
            return Reply(code if isinstance(code, int) else -1, "", output[-2000:], False, code)
        tail = output[closed + len(end) + 2 :]
        rc_text, _, err = tail.partition("\n")
        try:
            rc = int(rc_text.strip())
        except ValueError:
            rc = code if isinstance(code, int) else -1
        complete = "output_total_chars" not in result
        return Reply(rc, output[opened + len(start) + 1 : closed], err.strip(), complete, code)

    def chunk_step(self, body: str, *, stdin: str | None = None) -> Reply:
        """A step that moves one chunk: a backend error counts as a chunk that did not arrive (a
        service may refuse a request it finds too large), so the caller retries it smaller."""
        try:
            return self.step(body, stdin=stdin, timeout=300)
        except TransferFailed as exc:
            return Reply(-1, "", exc.why or exc.what, False)

    def check(self, body: str, what: str, *, stdin: str | None = None, timeout: int = STEP_TIMEOUT) -> str:
        """Run a step that must succeed; its payload, or TransferFailed naming ``what``."""
        reply = self.step(body, stdin=stdin, timeout=timeout)
        if reply.rc != 0 or not reply.complete:
            said = reply.err or reply.out[-500:] or "no output"
            status = (
                f"exit status {reply.rc}"
                if reply.complete
                else f"it did not finish within {timeout}s"
                if reply.code == 124
                else "it was interrupted"
                if reply.code == 130
                else "its output was cut off"
            )
            raise TransferFailed(f"{what} failed in the sandbox ({status})", why=said)
        return reply.out

    # -- what the sandbox has ---------------------------------------------------------------
    def probe(self) -> Probe:
        """Tools, $HOME, the working directory and a fresh temp directory (one execute)."""
        tools = " ".join((*REQUIRED_TOOLS, "gzip", "rm", "mkdir", "cat"))
        body = (
            f'for t in {tools}; do command -v "$t" >/dev/null 2>&1 && printf \'tool %s\\n\' "$t"; done\n'
            "printf 'tarv %s\\n' \"$(tar --version 2>/dev/null | head -n 1)\"\n"
            "printf 'findv %s\\n' \"$(find --version 2>/dev/null | head -n 1)\"\n"
            "printf 'home %s\\n' \"$(printf %s \"$HOME\" | base64 | tr -d '\\n')\"\n"
            "printf 'base %s\\n' \"$(printf %s \"$(pwd -P)\" | base64 | tr -d '\\n')\"\n"
            "printf 'tmp %s\\n' \"$(printf %s \"$(mktemp -d 2>/dev/null)\" | base64 | tr -d '\\n')\""
        )
        reply = self.step(body, timeout=60)
        if not reply.complete:
            raise TransferFailed(
                "the sandbox did not answer a plain shell step",
                why=reply.err or "no output",
                fix="check the backend with `hermes-backend-kit doctor --backend SPEC`",
            )
        found: dict[str, list[str]] = {}
        for line in reply.out.splitlines():
            key, _, value = line.partition(" ")
            found.setdefault(key, []).append(value)

        def text(key: str) -> str:
            raw = (found.get(key) or [""])[0]
            try:
                return base64.b64decode(raw).decode("utf-8", "surrogateescape")
            except (binascii.Error, ValueError):
                return ""

        return Probe(
            tools=set(found.get("tool", [])),
            gnu_tar="GNU tar" in " ".join(found.get("tarv", [])),
            gnu_find="GNU findutils" in " ".join(found.get("findv", [])),
            home=text("home"),
            base=text("base"),
            tmp=text("tmp"),
        )

    # -- bytes out of the sandbox -----------------------------------------------------------
    def iter_file(self, path: str, size: int, sha256: str, progress: Callable[[int], None]) -> Iterator[bytes]:
        """The ``size`` bytes of a sandbox file in checked chunks; at the end its SHA-256 must match."""
        total = hashlib.sha256()
        offset, chunk = 0, self.read_chunk
        scratch = q(path + ".chunk")
        while offset < size:
            want = min(chunk.size, size - offset)
            body = (
                f"tail -c +{offset + 1} {q(path)} | head -c {want} > {scratch} || exit 4\n"
                f"printf '%s %s\\n' \"$(wc -c < {scratch})\" \"$(sha256sum < {scratch} | cut -d ' ' -f 1)\"\n"
                f"base64 < {scratch}"
            )
            reply = self.chunk_step(body)
            data = self._chunk_out(reply, want)
            if data is None:
                if not chunk.shrink():
                    raise TransferFailed(
                        f"could not read {path} out of the sandbox intact: even {MIN_CHUNK} bytes per command "
                        "came back short or altered",
                        why=reply.err or "the backend's output loses or changes what a command prints",
                        fix="fix the backend's execute() output (the kit's certify shows which clause fails)",
                    )
                self.retries += 1
                continue
            if want == chunk.size:
                chunk.grow()
            total.update(data)
            offset += len(data)
            self.bytes_in += len(data)
            progress(len(data))
            yield data
        if total.hexdigest() != sha256:
            raise TransferFailed(
                f"{path} changed in the sandbox while it was read (checksums differ)",
                fix="rerun the command when nothing writes into the sandbox's temp directory",
            )

    def read_file(self, path: str, size: int, sha256: str, progress: Callable[[int], None]) -> bytes:
        """A whole (small) sandbox file, checked."""
        return b"".join(self.iter_file(path, size, sha256, progress))

    @staticmethod
    def _chunk_out(reply: Reply, want: int) -> bytes | None:
        if reply.rc != 0 and reply.complete:
            raise TransferFailed("reading a file in the sandbox failed", why=reply.err or reply.out[-300:])
        if not reply.complete:
            return None
        head, _, encoded = reply.out.partition("\n")
        try:
            count_text, digest = head.split()
            data = base64.b64decode("".join(encoded.split()), validate=True)
        except (ValueError, binascii.Error):
            return None
        if int(count_text) != want or len(data) != want or hashlib.sha256(data).hexdigest() != digest:
            return None
        return data

    # -- bytes into the sandbox -------------------------------------------------------------
    def appender(self, path: str, progress: Callable[[int], None]) -> Appender:
        return Appender(self, path, progress)


class Appender:
    """A write-only file object that appends to a sandbox file in checked chunks (``close`` flushes)."""

    def __init__(self, shell: SandboxShell, path: str, progress: Callable[[int], None]) -> None:
        self.shell = shell
        self.path = path
        self.progress = progress
        self.chunk = shell.write_chunk
        self.size = 0  # bytes the sandbox file holds
        self.sha = hashlib.sha256()
        self._buffer = bytearray()
        self.closed = False

    def write(self, data: bytes) -> int:
        self._buffer += data
        while len(self._buffer) >= self.chunk.size:
            self._send(self.chunk.size)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        while self._buffer:
            self._send(min(self.chunk.size, len(self._buffer)))
        self.closed = True

    def _send(self, count: int) -> None:
        piece = bytes(self._buffer[:count])
        part = q(self.path + ".part")
        target = q(self.path)
        body = (
            f"base64 -d > {part} || exit 4\n"
            f'[ "$(wc -c < {part})" = {len(piece)} ] || exit 5\n'
            f'[ "$(sha256sum < {part} | cut -d " " -f 1)" = {hashlib.sha256(piece).hexdigest()} ] || exit 5\n'
            f"cat {part} >> {target} && rm -f {part} || exit 6\n"
            f"wc -c < {target}"
        )
        encoded = base64.encodebytes(piece).decode("ascii")
        reply = self.shell.chunk_step(body, stdin=encoded)
        if reply.complete and reply.rc == 6:
            raise TransferFailed(
                f"could not append to {self.path} in the sandbox", why=reply.err or "cat failed (is its disk full?)"
            )
        if reply.complete and reply.rc == 0 and reply.out.strip() == str(self.size + len(piece)):
            del self._buffer[:count]
            self.size += len(piece)
            self.sha.update(piece)
            self.shell.bytes_out += len(piece)
            self.progress(len(piece))
            if count == self.chunk.size:
                self.chunk.grow()
            return
        if reply.complete and reply.rc == 0:
            raise TransferFailed(
                f"{self.path} in the sandbox holds {reply.out.strip()} bytes, expected {self.size + len(piece)}",
                why="something else writes to it",
            )
        if not self.chunk.shrink():
            raise TransferFailed(
                f"could not send data into the sandbox intact: even {MIN_CHUNK} bytes per command arrived short "
                "or altered",
                why=reply.err or f"exit status {reply.rc}",
                fix="fix the backend's stdin_data handling (the kit's certify shows which clause fails)",
            )
        self.shell.retries += 1

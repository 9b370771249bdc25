"""How a command and its stdin reach the container within protocol v1's limits.

Protocol v1 carries stdin as one UTF-8 string of at most 768 KiB without NUL,
a command of at most 64 KiB, and a request body of at most 1 MiB.  Hermes
hands over arbitrary bytes (a surrogateescape str) and commands that can be
longer, so the plan picks the first carrier that fits:

1. direct: the command and the stdin text as they are;
2. inline base64: stdin that is not plain text (NUL, undecodable bytes, or
   too many JSON escapes) travels base64-encoded and a prefix decodes it into
   a private temp file that becomes the command's stdin;
3. staged: stdin or a command too large for one request is first written to
   files under the temp dir by small upload commands (base64, 576 KiB each),
   then the command runs reading its stdin from that file (or sourcing
   itself from it).  Every staged file is removed as soon as it is opened.

Stdin is never streamed while the command runs: the command sees all of it,
then end of file.  Above ``MAX_STAGED_BYTES`` the plan refuses with a clear
message instead of trying.
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass, field

from .client import MAX_BODY_BYTES, encode

MAX_COMMAND_BYTES = 65_536
MAX_STDIN_BYTES = 786_432
MAX_STAGED_BYTES = 64 * 1024 * 1024
STAGE_CHUNK = MAX_STDIN_BYTES // 4 * 3  # raw bytes whose base64 is exactly the stdin limit
PREFIX_ROOM = 1024  # room for the lines a plan puts before the command

# The size of a request apart from its command and stdin, with every optional field present.
_FRAME = {
    "request_id": "0" * 32,
    "command": "",
    "timeout": 900.0,
    "login": False,
    "stdin": "",
    "concurrent": True,
    "max_output": 1 << 30,
}
_DECODE_INLINE = (
    '__hermes_in=$(mktemp) && base64 -d > "$__hermes_in" && exec 0<"$__hermes_in" && '
    'rm -f -- "$__hermes_in" || { echo "cloudflare_sandbox: could not decode stdin in the container" >&2; '
    "exit 125; }; unset __hermes_in"
)


class PayloadTooLarge(ValueError):
    """The command and stdin together exceed what this backend carries."""


@dataclass(frozen=True)
class Upload:
    """One staging exec: a short command and its base64 stdin."""

    command: str
    stdin: str


@dataclass(frozen=True)
class Plan:
    command: str
    stdin: str | None
    uploads: tuple[Upload, ...] = ()
    staged: tuple[str, ...] = field(default=())  # container paths to remove if the command never runs

    @property
    def carrier(self) -> str:
        if self.uploads:
            return "staged"
        return "base64" if self.command.startswith("__hermes_in=") else "direct"


def text_safe(value: str) -> bool:
    """Valid UTF-8 text without NUL: what protocol v1 carries as is."""
    if "\0" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _fits(command: str, stdin: str | None) -> bool:
    frame = {**_FRAME, "command": command, "stdin": stdin}
    return len(encode(frame)) <= MAX_BODY_BYTES


def _uploads(path: str, data: bytes) -> list[Upload]:
    target = shlex.quote(path)
    pieces = [data[i : i + STAGE_CHUNK] for i in range(0, len(data), STAGE_CHUNK)] or [b""]
    return [
        Upload(f"umask 077; base64 -d {'>' if i == 0 else '>>'} {target}", base64.b64encode(piece).decode("ascii"))
        for i, piece in enumerate(pieces)
    ]


def plan(command: str, stdin: str | None, *, tmp: str, tag: str) -> Plan:
    """The carrier for ``command`` with ``stdin`` (None: no stdin, the command reads EOF)."""
    cmd_bytes = command.encode("utf-8", "surrogateescape")
    data = stdin.encode("utf-8", "surrogateescape") if stdin is not None else None
    inline = text_safe(command) and len(cmd_bytes) <= MAX_COMMAND_BYTES - PREFIX_ROOM
    total = len(data or b"") + (0 if inline else len(cmd_bytes))
    if total > MAX_STAGED_BYTES:
        raise PayloadTooLarge(
            f"the command and its stdin are {total / 2**20:.1f} MiB; cloudflare_sandbox carries at most "
            f"{MAX_STAGED_BYTES // 2**20} MiB per command (bridge protocol v1 takes 768 KiB of stdin per request, "
            "larger stdin is staged in the container in parts). Send the data in smaller parts"
        )
    if inline:
        if data is None or (
            stdin is not None and text_safe(stdin) and len(data) <= MAX_STDIN_BYTES and _fits(command, stdin)
        ):
            return Plan(command, stdin)
        encoded = base64.b64encode(data).decode("ascii")
        wrapped = f"{_DECODE_INLINE}\n{command}"
        if len(encoded) <= MAX_STDIN_BYTES and _fits(wrapped, encoded):
            return Plan(wrapped, encoded)

    uploads: list[Upload] = []
    staged: list[str] = []
    lines: list[str] = []
    if data is not None:
        path = f"{tmp.rstrip('/')}/hermes-stdin-{tag}"
        staged.append(path)
        uploads += _uploads(path, data)
        lines.append(
            f"exec 0<{shlex.quote(path)} && rm -f -- {shlex.quote(path)} || "
            "{ echo 'cloudflare_sandbox: the staged stdin is missing in the container' >&2; exit 125; }"
        )
    if inline:
        lines.append(command)
    else:
        path = f"{tmp.rstrip('/')}/hermes-cmd-{tag}"
        staged.append(path)
        # bash reads a sourced file whole before running it, so it can delete itself first.
        uploads += _uploads(path, f"rm -f -- {shlex.quote(path)}\n".encode() + cmd_bytes)
        lines += [
            f"[ -r {shlex.quote(path)} ] || "
            "{ echo 'cloudflare_sandbox: the staged command is missing in the container' >&2; exit 125; }",
            f". {shlex.quote(path)}",
        ]
    return Plan("\n".join(lines), None, tuple(uploads), tuple(staged))

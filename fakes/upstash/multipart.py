"""A streaming multipart/form-data reader (python-multipart is not a kit dependency).

Enough for what the SDK sends to files/upload: text fields and file parts,
each with a Content-Disposition header, bodies taken byte for byte.  The body
is fed in chunks as it arrives; ``feed`` returns what those bytes completed,
so a part's data reaches its consumer piece by piece and no part is ever held
whole in memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_PARAM = re.compile(r';\s*([A-Za-z0-9_*-]+)="?([^";]*)"?')
MAX_HEADER_BYTES = 16 * 1024  # one part's header block


class MultipartError(ValueError):
    pass


@dataclass(frozen=True)
class PartStart:
    name: str
    filename: str | None


@dataclass(frozen=True)
class PartData:
    data: bytes


@dataclass(frozen=True)
class PartEnd:
    pass


Event = PartStart | PartData | PartEnd


def boundary_of(content_type: str) -> bytes:
    if not content_type.lower().startswith("multipart/form-data"):
        raise MultipartError("expected a multipart/form-data body")
    params = dict((k.lower(), v) for k, v in _PARAM.findall(content_type))
    if not params.get("boundary"):
        raise MultipartError("the multipart body has no boundary")
    return params["boundary"].encode("latin-1")


class StreamParser:
    """Feed the body in chunks; each ``feed`` yields ``PartStart``, ``PartData`` and ``PartEnd`` events."""

    def __init__(self, content_type: str):
        self._first = b"--" + boundary_of(content_type)
        self._delimiter = b"\r\n" + self._first
        self._buffer = bytearray()
        self._state = "preamble"  # -> headers -> data -> after (delimiter seen) -> headers ... -> done

    @property
    def done(self) -> bool:
        return self._state == "done"

    def feed(self, chunk: bytes) -> Iterator[Event]:
        self._buffer += chunk
        while True:
            if self._state == "preamble":
                if len(self._buffer) < len(self._first) + 2:
                    return
                if not self._buffer.startswith(self._first):
                    raise MultipartError("the multipart body does not start with its boundary")
                del self._buffer[: len(self._first)]
                self._state = "after"
            elif self._state == "after":
                if len(self._buffer) < 2:
                    return
                if self._buffer.startswith(b"--"):  # the closing delimiter; the epilogue is ignored
                    self._state = "done"
                    self._buffer.clear()
                    return
                if not self._buffer.startswith(b"\r\n"):
                    raise MultipartError("malformed multipart delimiter line")
                del self._buffer[:2]
                self._state = "headers"
            elif self._state == "headers":
                end = self._buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buffer) > MAX_HEADER_BYTES:
                        raise MultipartError(f"a multipart part's headers exceed {MAX_HEADER_BYTES} bytes")
                    return
                yield _start(bytes(self._buffer[:end]))
                del self._buffer[: end + 4]
                self._state = "data"
            elif self._state == "data":
                end = self._buffer.find(self._delimiter)
                if end >= 0:
                    if end:
                        yield PartData(bytes(self._buffer[:end]))
                    yield PartEnd()
                    del self._buffer[: end + len(self._delimiter)]
                    self._state = "after"
                    continue
                safe = len(self._buffer) - len(self._delimiter) + 1  # keep what may start a delimiter
                if safe > 0:
                    yield PartData(bytes(self._buffer[:safe]))
                    del self._buffer[:safe]
                return
            else:  # done
                self._buffer.clear()
                return

    def close(self) -> None:
        """The body ended: it must have ended with the closing boundary."""
        if self._state == "headers":
            raise MultipartError("a multipart part has no header end")
        if self._state != "done":
            raise MultipartError("the multipart body has no closing boundary")


def _start(head: bytes) -> PartStart:
    name = filename = None
    for line in head.decode("utf-8", "replace").split("\r\n"):
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-disposition":
            params = dict((k.lower(), v) for k, v in _PARAM.findall(value))
            name, filename = params.get("name"), params.get("filename")
    if name is None:
        raise MultipartError("a multipart part has no name")
    return PartStart(name, filename)

"""A small multipart/form-data reader (python-multipart is not a kit dependency).

Enough for what the SDK sends to files/upload: text fields and file parts,
each with a Content-Disposition header, bodies taken byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PARAM = re.compile(r';\s*([A-Za-z0-9_*-]+)="?([^";]*)"?')


@dataclass(frozen=True)
class Part:
    name: str
    filename: str | None
    data: bytes


class MultipartError(ValueError):
    pass


def boundary_of(content_type: str) -> bytes:
    if not content_type.lower().startswith("multipart/form-data"):
        raise MultipartError("expected a multipart/form-data body")
    params = dict((k.lower(), v) for k, v in _PARAM.findall(content_type))
    if not params.get("boundary"):
        raise MultipartError("the multipart body has no boundary")
    return params["boundary"].encode("latin-1")


def parse(body: bytes, content_type: str) -> list[Part]:
    delimiter = b"--" + boundary_of(content_type)
    chunks = body.split(b"\r\n" + delimiter)
    first = chunks[0]
    if not first.startswith(delimiter):
        raise MultipartError("the multipart body does not start with its boundary")
    chunks[0] = first[len(delimiter):]
    parts: list[Part] = []
    for chunk in chunks:
        if chunk.startswith(b"--"):  # the closing delimiter
            break
        if not chunk.startswith(b"\r\n"):
            raise MultipartError("malformed multipart delimiter line")
        head, sep, data = chunk[2:].partition(b"\r\n\r\n")
        if not sep:
            raise MultipartError("a multipart part has no header end")
        name = filename = None
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-disposition":
                params = dict((k.lower(), v) for k, v in _PARAM.findall(value))
                name, filename = params.get("name"), params.get("filename")
        if name is None:
            raise MultipartError("a multipart part has no name")
        parts.append(Part(name, filename, data))
    else:
        raise MultipartError("the multipart body has no closing boundary")
    return parts

"""Pack (host path, remote path) pairs into a tar whose members are the remote
absolute paths without the leading "/", the layout Hermes's sync-back expects."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable


def pack(pairs: Iterable[tuple[str, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for host, remote in pairs:
            tar.add(host, arcname=remote.lstrip("/"), recursive=False)
    return buffer.getvalue()

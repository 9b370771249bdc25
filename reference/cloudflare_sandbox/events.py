"""The exec stream's NDJSON events, checked line by line.

One JSON object per line, each ending in a newline and at most 64 KiB:
``heartbeat`` and ``started`` (skipped), ``output`` (text), then exactly one
terminal ``exit`` (an integer, never a boolean) or ``error`` (a code).  An
unknown type, a malformed line or anything after the terminal event is a
protocol error; the end of the stream without a terminal event is an
incomplete stream.  Either way the command's outcome is unknown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import BridgeError

MAX_LINE = 65_536


@dataclass
class Batch:
    """What one network chunk carried: output text, and the terminal event if it came."""

    output: list[str]
    exit_code: int | None = None
    error: str | None = None


def protocol_error(detail: str) -> BridgeError:
    return BridgeError("protocol_error", detail=detail, ran="unknown")


class EventReader:
    def __init__(self) -> None:
        self._pending = b""
        self.finished = False
        self.started = False

    def feed(self, chunk: bytes) -> Batch:
        batch = Batch(output=[])
        if not chunk:
            return batch
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_LINE:
            raise protocol_error("a line longer than 64 KiB")
        for line in lines:
            self._event(line, batch)
        return batch

    def _event(self, line: bytes, batch: Batch) -> None:
        if self.finished:
            raise protocol_error("data after the terminal event")
        if len(line) > MAX_LINE:
            raise protocol_error("a line longer than 64 KiB")
        try:
            event: Any = json.loads(line)
        except ValueError:
            raise protocol_error("a line that is not JSON") from None
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "output" and isinstance(event.get("data"), str):
            batch.output.append(event["data"])
        elif kind == "heartbeat":
            pass
        elif kind == "started":
            self.started = True
        elif kind == "exit" and type(event.get("exit_code")) is int:
            self.finished, batch.exit_code = True, event["exit_code"]
        elif kind == "error" and isinstance(event.get("code"), str):
            self.finished, batch.error = True, event["code"]
        else:
            raise protocol_error(f"an unexpected event {str(kind)[:40]!r}")

    def end(self) -> None:
        """The body ended: complete only after a terminal event and a final newline."""
        if self._pending:
            raise protocol_error("the stream ended inside a line")
        if not self.finished:
            raise BridgeError("incomplete_stream", ran="unknown")

"""How a reply is damaged on its way to the client, unit by unit (the kit's side of fakes/delivery.py).

A unit is what the receiver parses on its own: a line of an NDJSON or SSE
body, or a WebSocket frame.  The rules are the fakes' (fakes/delivery.py), so
a fault means the same whether a fake or a client-side injector applies it:

- ``drop`` / ``half-close``: pass ``after_bytes`` bytes, then cut the
  connection, or stop sending and keep it open;
- ``truncate``: at the first unit starting at or after ``after_bytes``, pass
  half of it, then cut the connection;
- ``garbage``: at that unit, insert the fault's payload as a unit of its own
  and carry on;
- a body that ends first: ``garbage`` is sent at the end, the others act there.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

CORRUPTING = ("drop", "half-close", "truncate", "garbage")
UNIT_KINDS = ("truncate", "garbage")  # need unit boundaries; drop and half-close cut anywhere


class Cutter:
    """Feeds units through one corrupting fault; each step says what to send and what happens next."""

    def __init__(self, kind: str, after_bytes: int, garbage: bytes):
        if kind not in CORRUPTING:
            raise ValueError(f"{kind!r} does not damage a reply; one of {', '.join(CORRUPTING)}")
        self.kind: str | None = kind
        self.after = max(0, after_bytes)
        self.garbage = garbage
        self.sent = 0
        self.stopped = False

    def feed(self, unit: bytes) -> tuple[list[bytes], str | None]:
        """(pieces to send now, then ``"drop"``, ``"half-close"`` or None to carry on)."""
        if self.stopped or not unit:
            return [], None
        kind = self.kind
        if kind in ("drop", "half-close") and self.sent + len(unit) >= self.after:
            self.stopped = True
            return [unit[: self.after - self.sent]], kind
        if kind in UNIT_KINDS and self.sent >= self.after:
            if kind == "garbage":
                self.kind = None
                self.sent += len(self.garbage) + len(unit)
                return [self.garbage, unit], None
            self.stopped = True
            return [unit[: len(unit) // 2]], "drop"
        self.sent += len(unit)
        return [unit], None

    def end(self) -> tuple[list[bytes], str | None]:
        """The body ended; a fault still pending acts here."""
        if self.stopped:
            return [], None
        self.stopped = True
        if self.kind == "garbage":
            return [self.garbage], None
        if self.kind in ("drop", "truncate"):
            return [], "drop"
        if self.kind == "half-close":
            return [], "half-close"
        return [], None


def lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Whole lines (each with its newline) from arbitrary chunks; a last line without one at the end."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        while True:
            newline = pending.find(b"\n")
            if newline < 0:
                break
            yield pending[: newline + 1]
            pending = pending[newline + 1 :]
    if pending:
        yield pending


async def alines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    pending = b""
    async for chunk in chunks:
        pending += chunk
        while True:
            newline = pending.find(b"\n")
            if newline < 0:
                break
            yield pending[: newline + 1]
            pending = pending[newline + 1 :]
    if pending:
        yield pending

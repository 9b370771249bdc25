"""Helpers of the Upstash fake's tests: the server seen through one API key, process and timing checks."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fakes.upstash import Settings, UpstashServer
from fakes.world import World


@dataclass
class Fake:
    """The module's server seen through one API key (its own boxes, names and quota)."""

    server: UpstashServer
    key: str

    @property
    def kw(self) -> dict[str, Any]:
        return {"api_key": self.key, "base_url": self.server.base_url}

    @property
    def world(self) -> World:
        return self.server.world

    def host_pid(self, box: Any, pid: int) -> int | None:
        """This machine's pid of the process ``box`` calls ``pid`` ($!): boxes have PID namespaces of their own."""
        found = self.world.get(box.id)
        return None if found is None else self.world.host_pid(found, pid)

    @property
    def settings(self) -> Settings:
        return self.server.settings

    @property
    def faults(self):  # type: ignore[no-untyped-def]
        return self.server.faults

    @property
    def url(self) -> str:
        return self.server.base_url

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Box-Api-Key": self.key}

    def create(self, **config: Any):  # type: ignore[no-untyped-def]
        from upstash_box import Box

        return Box.create(**self.kw, **config)


def alive(pid: int) -> bool:
    """Is ``pid`` a live process (not gone, not a zombie)?"""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def eventually(predicate: Any, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())

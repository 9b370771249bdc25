"""A started fake: the variables to export, its world, its keys, and how to stop it.

Its own module because each vendor package's ``start`` returns one and
``fakes.services`` starts those packages: neither has to import the other for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeService:
    name: str
    env: dict[str, str]
    world: Any = None
    secret_vars: frozenset[str] = frozenset()
    credential_var: str | None = None  # the variable whose value authenticates to the service
    paths_note: str = ""  # which paths box commands see (vendor paths or host temp paths), and why
    local: bool = False  # no service and no boxes: the backend's sandboxes are this machine's, by design
    pid: int | None = None  # the fake's own process, when it runs in one
    control: str | None = None  # that process's control address
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

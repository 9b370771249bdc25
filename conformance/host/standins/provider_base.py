"""Stand-in for ``agent.provider_base``: what every pluggable provider has."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class ProviderBase(ABC):
    @property
    @abstractmethod
    def name(self) -> str:
        """Config value and registry key: lowercase, no spaces."""

    @property
    def display_name(self) -> str:
        return self.name

    def get_setup_schema(self) -> dict[str, Any]:
        return {"name": self.display_name, "badge": "", "tag": "", "env_vars": []}

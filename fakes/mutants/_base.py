"""Shared scaffolding: a mutant is tempdir_box with its environment class swapped."""

from __future__ import annotations

from fakes.tempdir_box.box_provider import TempdirBoxProvider


def provider_with(env_class: type, mutant: str) -> TempdirBoxProvider:
    provider = TempdirBoxProvider()
    provider.name = f"mutant_{mutant}"  # type: ignore[misc]
    provider.environment_class = env_class
    return provider

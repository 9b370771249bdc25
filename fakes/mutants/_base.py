"""Shared scaffolding: a mutant is a backend with its environment class swapped.

``provider_with`` makes a tempdir_box provider with another environment class;
``recast`` makes a reference provider whose environments become a subclass.
"""

from __future__ import annotations

from typing import Any

from fakes.tempdir_box.box_provider import TempdirBoxProvider


def provider_with(env_class: type, mutant: str) -> TempdirBoxProvider:
    provider = TempdirBoxProvider()
    provider.name = f"mutant_{mutant}"
    provider.environment_class = env_class
    return provider


def recast(provider_class: type, env_class: type) -> Any:
    """A reference provider whose environments are ``env_class``, a subclass of its own environment class.

    The provider's own create path runs unchanged (validation, retries, the vendor's calls); only the
    environment it returns has its class swapped, so no module is patched.
    """
    base = env_class.__mro__[1]

    class Provider(provider_class):
        def create_environment(self, **kwargs: Any) -> Any:
            env = super().create_environment(**kwargs)
            if isinstance(env, base):
                env.__class__ = env_class
            return env

    Provider.__name__ = Provider.__qualname__ = f"{provider_class.__name__}With{env_class.__name__}"
    return Provider()

"""Type view of Hermes's agent.provider_base: the kit's stand-in (conformance.host.standins.provider_base)."""

from conformance.host.standins.provider_base import *

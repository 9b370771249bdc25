"""Type view of Hermes's tools.environments.base: the kit's stand-in (conformance.host.standins.base)."""

from conformance.host.standins.base import *

"""Type view of Hermes's tools.env_passthrough: the kit's stand-in (conformance.host.standins.env_passthrough)."""

from conformance.host.standins.env_passthrough import *

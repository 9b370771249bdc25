"""Type view of Hermes's agent.deadline: the kit's stand-in (conformance.host.standins.deadline)."""

from conformance.host.standins.deadline import *

"""Type view of Hermes's agent.secret_scope: the kit's stand-in (conformance.host.standins.secret_scope)."""

from conformance.host.standins.secret_scope import *

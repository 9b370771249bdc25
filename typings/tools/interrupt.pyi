"""Type view of Hermes's tools.interrupt: the kit's stand-in (conformance.host.standins.interrupt)."""

from conformance.host.standins.interrupt import *

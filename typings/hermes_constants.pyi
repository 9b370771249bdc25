"""Type view of Hermes's hermes_constants: the kit's stand-in (conformance.host.standins.hermes_constants)."""

from conformance.host.standins.hermes_constants import *

"""Type view of Hermes's tools.environments.file_sync: the kit's stand-in (conformance.host.standins.file_sync)."""

from conformance.host.standins.file_sync import *

"""Type view of Hermes's tools.environments.remote_common: the kit's stand-in
(conformance.host.standins.remote_common)."""

from conformance.host.standins.remote_common import *

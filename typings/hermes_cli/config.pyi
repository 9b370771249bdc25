"""Type view of Hermes's hermes_cli.config: the kit's stand-in (conformance.host.standins.hermes_cli_config)."""

from conformance.host.standins.hermes_cli_config import *

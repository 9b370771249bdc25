"""Type view of Hermes's agent.terminal_env_provider: the kit's stand-in
(conformance.host.standins.terminal_env_provider)."""

from conformance.host.standins.terminal_env_provider import *

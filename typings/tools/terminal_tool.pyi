"""Type view of Hermes's tools.terminal_tool: the kit's stand-in (conformance.host.standins.terminal_tool)."""

from conformance.host.standins.terminal_tool import *

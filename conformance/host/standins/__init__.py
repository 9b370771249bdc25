"""Clean-room stand-ins for the Hermes modules a terminal backend imports.

conformance.host.abi registers them under Hermes's own import names
(``agent.terminal_env_provider``, ``tools.environments.base`` ...) when the
running host lacks them, so plugins import them unchanged.  They are written
from the behaviour described in research/hermes-host.md, not from Hermes code.
"""

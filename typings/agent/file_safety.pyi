"""Type view of Hermes's agent.file_safety: the kit's stand-in (conformance.host.standins.file_safety)."""

from conformance.host.standins.file_safety import _hermes_home_path as _hermes_home_path
from conformance.host.standins.file_safety import _hermes_root_path as _hermes_root_path

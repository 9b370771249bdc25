"""Type view of Hermes's tools.environments.base_output: the kit's stand-in (conformance.host.standins.base_output)."""

from conformance.host.standins.base_output import *
from conformance.host.standins.base_output import _pipe_stdin as _pipe_stdin
from conformance.host.standins.base_output import _popen_bash as _popen_bash
from conformance.host.standins.base_output import _ThreadedProcessHandle as _ThreadedProcessHandle

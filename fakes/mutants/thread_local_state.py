"""Hands what _before_execute learnt to _run_bash through a thread-local.

_before_execute finds the box in the error state and leaves the refusal,
which names that state, in a ``threading.local()`` for _run_bash.  On
hermes-agent 0.19.0 both hooks run on the caller's thread and this works.
Current hosts spawn and wait on a worker thread: the refusal is lost, the
command is sent to the broken box, and the box's bare rejection is all the
user sees (what a remote service answers; the deepinfra reference backend
failed this way before its refusal moved onto the environment).
"""

import threading

from tools.environments.base_output import _ThreadedProcessHandle

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "the error-state refusal travels in a thread-local and is lost when the host spawns on a worker thread"
# Scope: the error-state check, and the other checks of a broken or vanished sandbox.
SCOPE = "test_persist or test_errors or test_faults"


class Env(TempdirBoxEnvironment):
    def __init__(self, **kwargs):
        self._hook_state = threading.local()
        super().__init__(**kwargs)

    def _before_execute(self):
        super()._before_execute()
        self._hook_state.refusal = super()._refusal() if self._box.state() == "error" else None

    def _run_bash(self, cmd_string, *, login=False, timeout=120, stdin_data=None):
        refusal = getattr(self._hook_state, "refusal", None)
        self._hook_state.refusal = None
        if refusal is not None:
            return _ThreadedProcessHandle(lambda: (refusal, 1))
        if self._box.state() == "error":
            rejection = f"tempdir box {self._box.id}: command rejected (409 Conflict)\n"
            return _ThreadedProcessHandle(lambda: (rejection, 1))
        return super()._run_bash(cmd_string, login=login, timeout=timeout, stdin_data=stdin_data)


provider = provider_with(Env, "thread_local_state")
BREAKS = frozenset(
    {
        "persist.error-reported",
    }
)

"""Stops its sandbox to end a timed-out command, as some vendors' stop does: every process of the box
dies and $HOME starts empty again, except the directory the backend declares it keeps (~/work).

The kit must judge this by the clause it breaks (a timeout ends the command, not the sandbox) and
nowhere else: the fault checks keep their run records in the directory the backend keeps, so a
record cannot vanish with $HOME and turn into "0 runs" under another clause.
"""

import os
import shutil

from fakes.mutants import stops_sandbox_on_timeout
from fakes.mutants._base import provider_with

WHAT = "a timeout stops the whole sandbox: every process dies and $HOME is emptied but for ~/work"
KEPT = "work"
# Scope: the kill checks, the background jobs it kills, and the fault checks that count runs.
SCOPE = "test_timeout or test_background or test_faults"


class Env(stops_sandbox_on_timeout.Env):
    def _kill_process(self, proc):
        super()._kill_process(proc)  # every process of the box dies
        home = self._box.home
        try:
            names = os.listdir(home)
        except OSError:  # the box is gone already
            return
        for name in names:
            if name == KEPT:
                continue
            path = os.path.join(home, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


provider = provider_with(Env, "wipes_home_on_timeout")
provider.conformance_persistent_path = f"~/{KEPT}"  # type: ignore[attr-defined]
BREAKS = frozenset({"timeout.command-not-sandbox"})

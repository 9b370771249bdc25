"""Kit test: what noxfile.py imports from the kit runs on the standard library alone.

nox reads the known backends (conformance/backends.py) and may build suite
commands (conformance/suite_command.py) in its own Python, where the project
and its dependencies are not installed.  ``python -I -S`` has no site-packages:
a third-party import in either module fails here first.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import conformance.backends, conformance.suite_command
project = sorted(m for m in sys.modules if m.split(".")[0] in ("conformance", "fakes", "reference"))
print(" ".join(project))
"""


def test_the_modules_noxfile_reads_import_the_standard_library_only():
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, str(ROOT)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["conformance", "conformance.backends", "conformance.suite_command"]

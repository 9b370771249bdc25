"""In a run of the checks pytest rewrites the checks' asserts, not those of third-party plugin packages.

pytest marks every module of every installed plugin's distribution for
rewriting; a run of the checks keeps only the kit's own packages marked
(conformance/plugin.py, pytest_load_initial_conftests), so hypothesis is
imported as its installed bytecode while the checks keep pytest's assertion
messages.  Shown in a fresh interpreter, by each module's loader.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import contextlib, io, json, sys
import pytest
with contextlib.redirect_stdout(io.StringIO()):
    pytest.main(sys.argv[1:])
loaders = {name: type(sys.modules[name].__loader__).__name__
           for name in ("hypothesis", "hypothesis.core", "conformance.checks.test_exec") if name in sys.modules}
print(json.dumps(loaders))
"""


def _loaders(*args: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args, "-p", "no:cacheprovider", "--collect-only", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_run_of_the_checks_rewrites_the_checks_and_not_hypothesis() -> None:
    loaders = _loaders("--pyargs", "conformance.checks")
    assert loaders["conformance.checks.test_exec"] == "AssertionRewritingHook", loaders
    assert loaders["hypothesis"] != "AssertionRewritingHook", loaders
    assert loaders["hypothesis.core"] != "AssertionRewritingHook", loaders


def test_another_run_keeps_pytests_own_marks(tmp_path) -> None:
    """A test suite that is not the checks (a user's, with the kit installed) is left as pytest made it."""
    (tmp_path / "test_uses_hypothesis.py").write_text("import hypothesis\n\ndef test_x():\n    assert True\n")
    loaders = _loaders(str(tmp_path / "test_uses_hypothesis.py"))
    assert loaders["hypothesis"] == "AssertionRewritingHook", loaders

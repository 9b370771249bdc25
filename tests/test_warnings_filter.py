"""Third-party deprecation noise stays out of a suite's output; the kit's own warnings do not."""

from __future__ import annotations

import re
import warnings

import pytest

from conformance.plugin import THIRD_PARTY_MODULES
from tests.conftest import run_suite


@pytest.mark.parametrize(
    "module, hidden",
    [
        ("upstash_box._exec_session", True),
        ("websockets.sync.client", True),
        ("conformancex", True),
        ("conformance", False),
        ("conformance.checks.test_exec", False),
        ("fakes.world", False),
        ("reference.upstash_box.session", False),
        ("isolation.driver", False),
        ("tests.conftest", False),
    ],
)
def test_the_filter_hides_only_modules_outside_the_kit(module, hidden):
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=THIRD_PARTY_MODULES)
        warnings.warn_explicit("old API", DeprecationWarning, filename="x.py", lineno=1, module=module)
    assert (not seen) is hidden


@pytest.mark.suite
def test_the_upstash_sdks_deprecation_warnings_stay_out_of_the_output(tmp_path):
    run = run_suite("--backend", "upstash_box", "-k", "test_exec and returncode", cwd=tmp_path, workers=0, timeout=300)
    assert run.report is not None, run.output[-3000:]
    assert not re.search(r"DeprecationWarning", run.output), run.output[-3000:]

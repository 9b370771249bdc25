"""Each reference backend certifies against its fake, started by the suite itself."""

from __future__ import annotations

import pytest

from tests.conftest import run_suite

pytestmark = pytest.mark.suite


@pytest.mark.parametrize("backend", ["upstash_box", "cloudflare_sandbox", "deepinfra"])
def test_reference_backend_is_certified_against_its_fake(backend, tmp_path):
    run = run_suite("--backend", backend, "-W", "ignore::DeprecationWarning", cwd=tmp_path)
    assert run.report is not None, run.output[-3000:]
    failed = {c["id"]: c.get("reason", "")[:300] for c in run.report["clauses"]
              if c["verdict"] == "fail" and c["level"] == "MUST"}
    assert not failed, failed
    assert run.report["certified"] is True
    assert run.report["fake"] == {"upstash_box": "upstash", "cloudflare_sandbox": "cloudflare",
                                  "deepinfra": "deepinfra"}[backend]

"""report.html: a self-contained page of a certification report, escaped and redacted, that a browser
renders without an error or a request, with the verdict, the failing clause, the groups and the bench plots."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from html import escape
from pathlib import Path

import pytest

from conformance import contract, redact
from conformance.report import bench_plot, html, matrix
from tests import headless_chromium, report_sim
from tests.conftest import ROOT, run_suite

BENCH = ROOT / "bench" / "results.json"
SCREENSHOT = ROOT / "reports" / "screenshots" / "report-html.png"
CLI = [sys.executable, "-m", "conformance.cli"]
needs_chromium = pytest.mark.skipif(
    headless_chromium.find() is None,
    reason="no chromium on PATH: `nox -s tests` installs Debian's chromium where it can (root and apt-get); "
    "install it (apt-get install chromium) to render report.html",
)


def _failing_report() -> dict:
    """A complete simulated run with one MUST and one SHOULD clause failing; the SHOULD one comes first in the
    report, so the page has to reorder them."""
    levels = {c.id: c.level for c in report_sim.CONTRACT}
    present = report_sim.DECLARED | report_sim.WORLD
    report = report_sim.run(present, fail={"exec.returncode-key", "provider.name-charset"})
    assert levels["provider.name-charset"] == "SHOULD" and levels["exec.returncode-key"] == "MUST"
    return report


def test_page_is_self_contained_escaped_redacted_and_puts_failing_must_first(monkeypatch):
    report = _failing_report()
    secret = "s3cret-value-for-the-page"
    clause = next(c for c in report["clauses"] if c["id"] == "exec.returncode-key")
    clause["checks"][0]["excerpt"] = f"AssertionError: <script>alert('x')</script> & key={secret}"
    own = redact.Redactor()
    own.register(secret)
    monkeypatch.setattr(redact, "redact_data", own.redact_data)

    page = html.render(report, contract.load())

    assert secret not in page and "key=***" in page
    assert "<script" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; key=***" in page
    # nothing to fetch: no script, stylesheet link, image source, CSS url() or import; a CSP forbids them anyway
    assert not re.search(r"<script|\bsrc=|url\(|@import|rel=\"stylesheet\"", page)
    assert f'content="{html.CSP}"' in page and "default-src 'none'" in html.CSP
    failures = page[page.index("<h2>Failures</h2>") : page.index("<h2>Summary</h2>")]
    assert failures.index("exec.returncode-key") < failures.index("provider.name-charset")
    opened = set(re.findall(r'<details class="group" id="group-([a-z-]+)" open>', page))
    assert opened == {"exec", "provider"}
    provider = page[page.index('id="group-provider"') : page.index("</details>", page.index('id="group-provider"'))]
    assert provider.index("provider.name-charset") < provider.index("provider.abc-instance")
    faults = page[page.index("<h2>Fault matrix</h2>") : page.index("<h2>Run environment</h2>")]
    assert all(f"<td>{escape(fault)}</td><td><code>{cid}</code>" in faults for fault, cid in matrix.FAULTS)


def test_bench_plots_one_per_figure_with_ratios_absolute_values_and_reasons():
    data = bench_plot.load(BENCH)
    plots = dict(bench_plot.plots(data))
    labels = {f["label"] for f in data["figures"].values()}
    assert set(plots) <= labels and len(plots) >= len(labels) - 1
    cold = plots[data["figures"]["cold_start_ms"]["label"]]
    ratio = data["targets"]["tempdir_box"]["figures"]["cold_start_ms"]["ratio"]
    assert f"{ratio:.3g}x" in cold and "1 = local bash -c" in cold
    rows = re.findall(r'text-anchor="end">([^<]+)</text>', cold)
    assert rows == [t["label"] for name, t in data["targets"].items() if name != data["baseline"]]
    suite = plots[data["figures"]["suite_s"]["label"]]
    assert "absolute (s)" in suite  # the baseline runs no suite: plotted as values, not ratios
    na = [
        (t["label"], f["na"])
        for t in data["targets"].values()
        for key, f in t["figures"].items()
        if key == "stdin_mib_s" and f.get("na")
    ]
    if na:
        assert f"n/a: {na[0][1]}" in plots[data["figures"]["stdin_mib_s"]["label"]]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "cannot read bench results {path}: No such file or directory"),
        ("not json", "bench results {path} are not JSON"),
        ('{"schema": "something/else"}', "{path} is not a benchmark results file (schema 'something/else'"),
        (
            json.dumps(
                {
                    "schema": "hermes-backend-kit/bench/v2",
                    "figures": {"a": {}},
                    "targets": {"x": {"figures": {"a": {"value": "fast", "ratio": None}}}},
                }
            ),
            "targets.x.figures.a.value is 'fast', not a number or null",
        ),
    ],
)
def test_a_bad_bench_file_stops_certify_before_the_run_naming_the_file_and_the_fix(tmp_path, content, message):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "out"
    done = subprocess.run(
        [*CLI, "certify", "--backend", "tempdir_box", "--bench", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert message.format(path=path) in done.stderr and "nox -s bench" in done.stderr
    assert "Traceback" not in done.stderr and "certifying" not in done.stdout and not out.exists()


def test_report_html_refuses_what_is_not_a_report(tmp_path):
    page = tmp_path / "page.html"
    done = subprocess.run(
        [*CLI, "report", "html", str(BENCH), "--out", str(page)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and str(BENCH) in done.stderr and "not a certification report" in done.stderr
    assert "Traceback" not in done.stderr and not page.exists()


def _chromium_entries(home: Path) -> set[str]:
    """What Chromium would leave in a home directory it was allowed to use."""
    found = set()
    for sub in ("", ".config", ".cache", ".local/share"):
        folder = home / sub
        if folder.is_dir():
            found |= {f"{sub}/{n}" for n in os.listdir(folder) if "chrom" in n.lower() or n == ".pki"}
    return found


@pytest.mark.suite
@needs_chromium
def test_report_html_of_a_real_run_renders_in_headless_chromium(tmp_path):
    # A real, narrowed run: a mutant whose kill misses the command's children fails timeout.kills-tree (MUST);
    # the provider group passes; everything else did not run, so the run is not certified.
    run = run_suite(
        "--backend",
        "fakes.mutants.no_group_kill:provider",
        "--fake",
        "tempdir",
        "-k",
        "test_timeout or test_provider",
        cwd=tmp_path,
        workers=0,
    )
    assert run.report is not None, run.output[-3000:]
    verdicts = run.verdicts()
    assert verdicts["timeout.kills-tree"] == "fail" and not run.report["certified"]
    page = tmp_path / "report.html"
    done = subprocess.run(
        [*CLI, "report", "html", str(tmp_path / "report.json"), "--bench", str(BENCH), "--out", str(page)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    home_before = _chromium_entries(Path.home())

    started = time.perf_counter()
    shown = headless_chromium.render(page, tmp_path / "chromium.log")
    seconds = time.perf_counter() - started

    assert shown.errors == [], shown.errors
    assert shown.requests == [page.resolve().as_uri()]  # the page itself, nothing else
    assert shown.title.startswith("DIAGNOSTIC: ")  # -k narrowed the run
    text = shown.text
    assert "Why not certified" in text and "a diagnostic run narrowed by -k test_timeout or test_provider" in text
    assert "not run" in text
    failures = text[text.index("Failures") : text.index("Summary")]
    assert "timeout.kills-tree" in failures and contract.load().get("timeout.kills-tree").statement in failures
    groups = text[text.index("Verdicts per group") : text.index("Fault matrix")]
    for group in ("provider", "timeout", "exec", "faults"):
        assert re.search(rf"^{group} ", groups, re.M), group
    # a group with a failure is open, the others closed: their clauses are not on screen
    assert "timeout.kills-tree" in groups and "timeout.result-124" in groups
    assert verdicts["provider.abc-instance"] == "pass" and "provider.abc-instance" not in groups
    assert "Fault matrix" in text and "faults.output-flood" in text
    bench = text[text.index("Benchmarks") : text.index("Run environment")]
    assert "cold start: create to first result" in bench and "tempdir_box" in bench and "1 = local bash -c" in bench
    assert "fakes.mutants.no_group_kill:provider" in text[text.index("Run environment") :]

    assert shown.screenshot.startswith(b"\x89PNG\r\n\x1a\n") and shown.size[1] > 1000
    (tmp_path / "report-html.png").write_bytes(shown.screenshot)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tmp_path / "report-html.png", SCREENSHOT)
    assert not headless_chromium.group_alive(shown.pid), "a chromium process outlived the render"
    assert _chromium_entries(Path.home()) <= home_before, "chromium wrote in the user's home"
    print(
        f"report.html: {page.stat().st_size} bytes, rendered by {shown.version} in {seconds:.1f} s, "
        f"{shown.size[0]}x{shown.size[1]} CSS px; screenshot {SCREENSHOT}"
    )

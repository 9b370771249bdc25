"""pytest plugin (entry point ``pytest11``): run the checks against a backend.

    python -m pytest --pyargs conformance.checks --backend tempdir_box --report report.json

The plugin is inert for test suites that are not conformance checks: it only
adds options and the ``clause`` marker.  For checks (tests marked with
``@pytest.mark.clause(...)``) it sets up one KitRun per process, skips a
check as not applicable when its clauses need a capability or host feature
the run lacks, records every outcome against the clauses it cites, and at the
end writes the JSON report and prints a per-group table.  Works under
pytest-xdist: workers send outcomes and run context with their reports.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conformance import backends, contract
from conformance.host.abi import HOST_MODES
from conformance.report import build, junit, table
from conformance.verdicts import CheckOutcome, gate_reason

_STATE = pytest.StashKey["_KitState"]()


class _KitState:
    def __init__(self) -> None:
        self.outcomes: dict[str, CheckOutcome] = {}
        self.context: dict[str, Any] = {}
        self.started = time.time()
        self.report: dict[str, Any] | None = None
        self.waivers: list[Any] = []
        self.run: Any = None  # this process's KitRun, once a check asked for it


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hermes-backend-kit", "Hermes terminal backend conformance")
    group.addoption("--backend", default=backends.DEFAULT_BACKEND,
                    help="backend under test: a known name ({}), a plugin directory, module:attr or "
                         "ep:NAME (default: %(default)s)".format(", ".join(backends.KNOWN_BACKENDS)))
    group.addoption("--backend-config", default=None, metavar="FILE.yaml",
                    help="terminal config, exported variables and declared capabilities for the backend")
    group.addoption("--host", default="auto", choices=HOST_MODES,
                    help="hermes: the installed hermes-agent; builtin: the kit's stand-ins; auto: hermes if importable")
    group.addoption("--fake", default=None, metavar="VENDOR",
                    help="run against this fake service (implied for known backends unless --live)")
    group.addoption("--live", action="store_true", default=False,
                    help="use the real service with the credentials in the environment; no fake")
    group.addoption("--report", default=None, metavar="PATH", help="write the JSON certification report here")
    group.addoption("--waivers", default=None, metavar="FILE.yaml",
                    help="accepted known failures: clause, reason, issue URL, expiry date, strict")
    group.addoption("--kit-progress", action="store_true", default=False,
                    help="print a line as each check module finishes (the certify command uses it)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): the contract clause ids this check asserts")
    config.stash[_STATE] = _KitState()
    if config.option.waivers and not hasattr(config, "workerinput"):
        from conformance.waivers import WaiverError, load

        try:
            config.stash[_STATE].waivers = load(config.option.waivers, contract.load())
        except WaiverError as exc:
            raise pytest.UsageError(f"hermes-backend-kit: {exc}") from None
    config.pluginmanager.register(_Recorder(config), "hermes-backend-kit-recorder")
    settings = _hypothesis_settings()
    if settings is not None:
        settings.register_profile("hermes-backend-kit", deadline=None, database=None, derandomize=True,
                                  max_examples=20, print_blob=True,
                                  suppress_health_check=list(_hypothesis_health_checks()))


def _hypothesis_settings() -> Any:
    try:
        from hypothesis import settings
    except ImportError:
        return None
    return settings


def _hypothesis_health_checks() -> list[Any]:
    from hypothesis import HealthCheck

    return [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
            HealthCheck.large_base_example]


def clause_ids(item: pytest.Item) -> tuple[str, ...]:
    ids: list[str] = []
    for mark in item.iter_markers("clause"):
        ids.extend(str(a) for a in mark.args)
    return tuple(dict.fromkeys(ids))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    kit_contract = None
    for item in items:
        ids = clause_ids(item)
        if not ids:
            continue
        kit_contract = kit_contract or contract.load()
        unknown = [cid for cid in ids if cid not in kit_contract]
        if unknown:
            raise pytest.UsageError(
                f"{item.nodeid} cites unknown clause(s) {', '.join(unknown)}; "
                "fix the marker or add the clause to contract.yaml"
            )
        item.user_properties.append(("clauses", list(ids)))


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def kit(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The KitRun of this process: host, plugin, fake service, capabilities."""
    from conformance.config import BackendConfigError
    from conformance.contract import ContractError
    from conformance.host.abi import HostError
    from conformance.host.loader import LoadError
    from conformance.run import KitRun, RunOptions
    from fakes.services import UnknownFake

    opts = request.config.option
    options = RunOptions(backend=opts.backend, backend_config=opts.backend_config, host=opts.host,
                         fake=opts.fake, live=opts.live)
    try:
        run = KitRun.start(options, tmp_path_factory.mktemp("kit"))
    except (BackendConfigError, LoadError, HostError, ContractError, UnknownFake) as exc:
        # A setup problem is one clear message, not a traceback per check.
        pytest.exit(f"hermes-backend-kit: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    request.config.stash[_STATE].run = run
    yield run
    run.close()


@pytest.fixture(autouse=True)
def _kit_clause_gate(request: pytest.FixtureRequest) -> None:
    """For checks only: send the run context along and skip what does not apply."""
    ids = clause_ids(request.node)
    if not ids:
        return
    run = request.getfixturevalue("kit")
    reason = skip_reason(run, ids)
    request.node.user_properties.append(("kit_context", json.dumps(run.context())))
    if reason:
        pytest.skip(reason)


def skip_reason(run: Any, ids: tuple[str, ...]) -> str | None:
    """Why a check citing ``ids`` does not run: not applicable (backend or host), or unverified (harness)."""
    reason = gate_reason(run.contract, ids, run.capabilities.present)
    if reason:
        return reason
    for cid in ids:
        clause = run.contract.get(cid)
        if clause.host_feature and not run.host_has(clause.host_feature) and run.env_is_base():
            return f"not-applicable (host: the {run.host.mode} host lacks {clause.host_feature})"
    return None


@pytest.fixture
def make_env(kit):
    """Create environments for one check; every one is cleaned up afterwards."""
    made: list[Any] = []

    def create(task_id: str | None = None, **kwargs: Any) -> Any:
        env = kit.create(task_id, **kwargs)
        made.append(env)
        return env

    yield create
    for env in made:
        kit.release(env)


@pytest.fixture
def env(make_env):
    """A fresh, non-persistent environment."""
    return make_env()


# ------------------------------------------------------------------ recording
class _Recorder:
    """Collects check outcomes (from workers too) and writes the report at the end."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.state = config.stash[_STATE]
        self._announced: set[str] = set()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.state.started = time.time()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        ids = props.get("clauses")
        if not ids:
            return
        if "kit_context" in props and not self.state.context:
            self.state.context = json.loads(props["kit_context"])
        outcome = self.state.outcomes.setdefault(report.nodeid, CheckOutcome(report.nodeid, tuple(ids)))
        outcome.absorb(report.when, report.outcome, _reason(report), report.duration)
        if report.when == "teardown" and self.config.option.kit_progress:
            self._progress(report.nodeid)

    def _progress(self, nodeid: str) -> None:
        """One line when every check of a module has finished."""
        from conformance import manifest

        module = manifest.check_key(nodeid).split("::", 1)[0]
        expected = {c for c in manifest.shipped()["checks"] if c.startswith(module + "::")}
        done = [o for o in self.state.outcomes.values() if manifest.check_key(o.nodeid).split("::", 1)[0] == module]
        if len(done) < len(expected) or module in self._announced:
            return
        self._announced.add(module)
        counts = {k: sum(1 for o in done if o.outcome == k) for k in ("passed", "failed", "skipped")}
        writer = self.config.pluginmanager.get_plugin("terminalreporter")
        if writer is not None:
            writer.ensure_newline()
            writer.write_line(f"[{module.removeprefix('test_').removesuffix('.py')}] {len(done)} checks: "
                              f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        """Mask credential values in a failing check's report before it is shown or sent on."""
        outcome = yield
        report = outcome.get_result()
        run = self.state.run
        if run is None or report.passed or not clause_ids(item):
            return
        from reference.common.redact import redact

        secrets = run.secret_values()
        text = str(report.longrepr)
        if any(v in text for v in secrets):
            report.longrepr = redact(text, secrets)

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file, so the certificate reaches it
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput") or not self.state.outcomes:
            return  # an xdist worker, or no checks ran: nothing to report
        from conformance import manifest

        complete, incomplete = manifest.completeness(self.state.outcomes)
        opts = self.config.option
        self.state.report = build.build(
            contract.load(), self.state.outcomes.values(), self.state.context,
            duration_s=time.time() - self.state.started, started_at=self.state.started, spec=opts.backend,
            host_requested=opts.host, waivers=self.state.waivers, complete=complete, incomplete=incomplete,
            checks_sha256=manifest.files_digest(manifest.check_files()),
        )
        if opts.report:
            path = Path(opts.report)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.state.report, indent=2) + "\n")
        junit.add_certificate(self.config, self.state.report)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        report = self.state.report
        if report is None:
            return
        terminalreporter.section("hermes-backend-kit: verdicts per group")
        for line in table.render(report):
            terminalreporter.write_line(line)
        for reason in report["incomplete_reasons"]:
            terminalreporter.write_line(f"  incomplete: {reason}")
        for error in report["errors"]:
            terminalreporter.write_line(f"  waiver error: {error}")
        for clause in report["clauses"]:
            if "waived" in clause:
                w = clause["waived"]
                terminalreporter.write_line(f"  WAIVED {clause['level']} {clause['id']} ({clause['verdict']}) until "
                                            f"{w['expires']}: {w['reason']} {w['issue']}")
        for clause in report["clauses"]:
            if clause["verdict"] == "fail" and clause["level"] == "MUST":
                terminalreporter.write_line(f"  MUST fail {clause['id']}: {clause.get('reason', '')[:300]}")
        if config.option.report:
            terminalreporter.write_line(f"report written to {config.option.report}")


def _reason(report: pytest.TestReport) -> str:
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if report.outcome == "failed":
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
        if crash:
            return crash[:500]
        text = (getattr(report, "longreprtext", "") or str(report.longrepr)).strip()
        return text.splitlines()[-1][:500] if text else "failed"
    return ""

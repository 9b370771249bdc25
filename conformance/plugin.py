"""pytest plugin (entry point ``pytest11``): run the checks against a backend.

    python -m pytest --pyargs conformance.checks --backend tempdir_box --report report.json

The plugin is inert for test suites that are not conformance checks: it only
adds options and the ``clause`` marker.  For checks (tests marked with
``@pytest.mark.clause(...)``) it sets up one KitRun per process, skips a
check as not applicable when its clauses need a capability or host feature
the run lacks, records every outcome against the clauses it cites, and at the
end writes the JSON report and prints a per-group table.  Works under
pytest-xdist: workers send outcomes and run context with their reports.

For a run of the checks the plugin also:

- redacts (conformance.redact) every check report before the terminal, the
  junit.xml writer or the xdist controller sees it, the terminal output, and
  report.json;
- loads the backend once in the controller before xdist starts its workers,
  so a bad path, plugin.yaml, register(ctx) or --backend-config is one line
  (a usage error) instead of an INTERNALERROR from every worker;
- gives each check a wall-clock deadline (--check-deadline) on top of the
  per-call deadlines (--call-deadline), so every run ends;
- keeps pytest's temp files and hypothesis's cache in a run-owned temp root
  that is removed at the end (unless --basetemp names one).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conformance import backends, bytecode, contract, leftovers, progress, redact, schedule, verdicts
from conformance.host.abi import HOST_MODES
from conformance.report import build, junit, table
from conformance.report.headline import must_failure_lines
from conformance.report.markdown import fake_world_line
from conformance.selection import Selection
from conformance.traceability import black_box_needs, clause_ids
from conformance.verdicts import CheckOutcome, gate_reason

_STATE = pytest.StashKey["_KitState"]()
_SELECTION = pytest.StashKey[Selection]()
CHECKS_DIR = Path(__file__).resolve().parent / "checks"
CHECK_DEADLINE_S = 300.0  # one check, wall clock; each backend call has its own, shorter deadline


class _KitState:
    def __init__(self) -> None:
        self.outcomes: dict[str, CheckOutcome] = {}
        self.context: dict[str, Any] = {}
        self.started = time.time()
        self.report: dict[str, Any] | None = None
        self.waivers: list[Any] = []
        self.run: Any = None  # this process's KitRun, once a check asked for it
        self.run_root: Path | None = None  # the run-owned temp root this process made (and removes)
        self.bytecode_restore: tuple[dict[str, str | None], tuple[str | None, bool]] | None = None
        self.host_gaps: dict[str, int] = {}  # Hermes module the host lacks -> checks it stopped (conformance.host.gaps)
        self.host_features: dict[str, bool] | None = None  # the preflight's probe of the host, for the workers


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hermes-backend-kit", "Hermes terminal backend conformance")
    group.addoption(
        "--backend",
        default=backends.DEFAULT_BACKEND,
        help="backend under test: a known name ({}), a plugin directory, module:attr, "
        "ep:NAME or hermes:local / hermes:ssh (default: %(default)s)".format(", ".join(backends.KNOWN_BACKENDS)),
    )
    group.addoption(
        "--backend-config",
        default=None,
        metavar="FILE.yaml",
        help="terminal config, exported variables and declared capabilities for the backend",
    )
    group.addoption(
        "--host",
        default="auto",
        choices=HOST_MODES,
        help="hermes: the installed hermes-agent; builtin: the kit's stand-ins; auto: hermes if importable",
    )
    group.addoption(
        "--ignore-requires-hermes",
        action="store_true",
        help="judge the plugin on the installed Hermes even when its requires_hermes excludes that release",
    )
    group.addoption(
        "--fake",
        default=None,
        metavar="VENDOR",
        help="run against this fake service (implied for known backends unless --live)",
    )
    group.addoption(
        "--live",
        action="store_true",
        default=False,
        help="use the real service with the credentials in the environment; no fake",
    )
    group.addoption(
        "--fake-control",
        default=None,
        metavar="ADDRESS",
        help="use the fake started by hand with `hermes-backend-kit fake serve`, at the control "
        "address it printed (default: $HERMES_KIT_FAKE_CONTROL); one worker only (no -n)",
    )
    group.addoption(
        "--client-faults",
        nargs="?",
        const="on",
        default=None,
        metavar="on|off|VENDOR|ROUTES.yaml|tcp:HOST:PORT",
        help="inject transport faults in the backend's own HTTP (httpx, through respx) and WebSocket "
        "clients instead of the fake's fault script; the value names the route table (the run's "
        "vendor by default), or tcp:HOST:PORT puts a loopback TCP proxy in front of that endpoint "
        "(its address in $HERMES_KIT_TCP_PROXY for --backend-config). Without the option: client-side "
        "only when no fake scripts faults (live) and the kit knows the vendor; off: never. Write "
        "--client-faults=VALUE",
    )
    group.addoption("--report", default=None, metavar="PATH", help="write the JSON certification report here")
    group.addoption(
        "--kit-select",
        default=None,
        metavar="EXPR",
        help="a diagnostic run of some checks: clause ids and groups (exec, exec.exit-code,stdin) or a -k "
        "expression; its report is never a certificate and the clauses left out are 'not run'",
    )
    group.addoption(
        "--waivers",
        default=None,
        metavar="FILE.yaml",
        help="accepted known failures: clause, reason, issue URL, expiry date, strict",
    )
    progress.add_option(group)
    group.addoption(
        "--kit-progress",
        action="store_true",
        default=False,
        help="the same as --progress=plain, unless --progress names another form",
    )
    group.addoption(
        "--call-deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds the kit waits for loading the plugin, create_environment() and cleanup() "
        "before failing the check (default 60)",
    )
    group.addoption(
        "--check-deadline",
        type=float,
        default=CHECK_DEADLINE_S,
        metavar="SECONDS",
        help="seconds one check may run before it fails (default: %(default)s)",
    )
    group.addoption(
        "--kit-check-costs",
        default=None,
        metavar="PATH",
        help="append each check's wall time, CPU seconds and environments created to PATH (JSON lines; "
        "conformance/check_costs.py)",
    )
    group.addoption(
        "--kit-error-file",
        default=None,
        metavar="PATH",
        help="write a setup error (bad backend, plugin.yaml, config) here as JSON (what, why, fix) "
        "instead of printing it; the certify command reads it and prints it in one line",
    )


# Packages whose modules pytest rewrites the asserts of in a run of the checks: the kit's own.
REWRITTEN_PACKAGES = ("conformance", "fakes", "reference", "isolation", "archives")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """In a run of the checks, pytest rewrites the asserts of the kit's modules and the checks only.

    pytest marks every module of every installed plugin's distribution for assert rewriting, so
    each process of a run would parse and rewrite all of hypothesis (about a second of CPU where
    no bytecode cache is written) though no check asserts anything inside it.  Plugins whose
    modules are already imported keep what they have; a hook pytest no longer shapes this way
    is left alone.
    """
    if not names_checks(args, "--pyargs" in args):
        return
    hook = getattr(early_config.pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    cache = getattr(hook, "_marked_for_rewrite_cache", None)
    if isinstance(marked, set) and isinstance(cache, dict):
        marked.intersection_update(n for n in set(marked) if n.split(".", 1)[0] in REWRITTEN_PACKAGES)
        cache.clear()


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): the contract clause ids this check asserts")
    config.addinivalue_line(
        "markers",
        "black_box(*harness): the check observes its clauses through the backend "
        "alone, needing only these harness capabilities",
    )
    config.stash[_STATE] = _KitState()
    if runs_checks(config):
        _configure_check_run(config)
        _configure_selection(config)
    if config.option.waivers and not hasattr(config, "workerinput"):
        from conformance.waivers import WaiverError, load

        try:
            config.stash[_STATE].waivers = load(config.option.waivers, contract.load())
        except WaiverError as exc:
            raise pytest.UsageError(*setup_error_lines(config, exc)) from None
    config.pluginmanager.register(_Recorder(config), "hermes-backend-kit-recorder")
    if config.option.kit_check_costs and runs_checks(config):
        from conformance.check_costs import CheckCosts

        costs = CheckCosts(config, config.option.kit_check_costs, lambda: current_run(config))
        config.pluginmanager.register(costs, "hermes-backend-kit-costs")
    # An xdist controller runs no check: hypothesis (whose whole package pytest rewrites on import, as
    # a plugin's) is imported only where checks run.
    settings = None if _dist_controller(config) else _hypothesis_settings()
    if settings is not None and runs_checks(config):
        _without_local_constants()
    if settings is not None:
        settings.register_profile(
            "hermes-backend-kit",
            deadline=None,
            database=None,
            derandomize=True,
            max_examples=20,
            print_blob=True,
            suppress_health_check=list(_hypothesis_health_checks()),
        )


def _configure_selection(config: pytest.Config) -> None:
    """--kit-select: a list of clauses and groups is applied at collection, a -k expression by pytest's -k."""
    expr = config.option.kit_select
    if not expr:
        return
    from conformance import selection
    from conformance.errors import KitError

    try:
        chosen = selection.parse(expr, contract.load())
    except KitError as exc:
        raise pytest.UsageError(*setup_error_lines(config, exc)) from None
    config.stash[_SELECTION] = chosen
    if chosen.clauses is None:
        keyword = config.option.keyword
        config.option.keyword = f"({keyword}) and ({chosen.expr})" if keyword else chosen.expr


def _selection_label(config: pytest.Config) -> str | None:
    """What narrowed this run of the checks, for the report: --kit-select, -k or -m."""
    chosen = config.stash.get(_SELECTION, None)
    if chosen is not None:
        return str(chosen.describe())
    opts = config.option
    if getattr(opts, "keyword", ""):
        return f"-k {opts.keyword}"
    if getattr(opts, "markexpr", ""):
        return f"-m {opts.markexpr}"
    return None


def _dist_controller(config: pytest.Config) -> bool:
    """This process is pytest-xdist's controller: its workers run the checks."""
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"


def _hypothesis_settings() -> Any:
    try:
        from hypothesis import settings
    except ImportError:
        return None
    return settings


def _without_local_constants() -> None:
    """Hypothesis's inputs drawn without the constants of the "local" modules loaded in the process.

    Hypothesis (its recent versions) reads the source of every module outside the standard library and
    site-packages that a process has loaded (an editable kit, the plugin under test) and mixes their
    literals into what it draws.  The checks' inputs would then depend on where the kit and the plugin
    are installed (an editable kit's modules count, an installed one's do not), not on the kit's
    version alone, and a derandomized run would not be the same run everywhere.  Its built-in
    constants stay.
    """
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return
    if callable(getattr(providers, "_get_local_constants", None)) and hasattr(providers, "_local_constants"):
        empty = providers.Constants()
        providers._get_local_constants = lambda: empty


def _hypothesis_health_checks() -> list[Any]:
    from hypothesis import HealthCheck

    return [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.large_base_example,
    ]


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the process has built by now (pytest, the kit, the collected checks) lives as long as it does:
    moved out of the garbage collector's way, so each collection during the checks scans only what they
    make.

    Automatic collection is then off while the checks run: the kit collects between checks, on a
    thread of its own with a deadline (``collect_garbage``).  A collection that starts inside a backend
    call runs other environments' finalisers there, and Hermes's ``__del__`` calls ``cleanup()``: one
    that syncs back under the host's sync lock while the interrupted call holds it never returns, and
    the lock it keeps would hang every later cleanup of the worker.  Checks of finalisers collect
    explicitly, where they mean to."""
    if runs_checks(session.config):
        gc.collect()
        gc.freeze()
        gc.disable()


GC_DEADLINE_S = 60.0  # a collection between checks: finalisers may clean up several environments


def collect_garbage(deadline: float = GC_DEADLINE_S) -> None:
    """gc.collect() on its own thread, bounded: a finaliser that hangs costs one deadline and a warning."""
    from conformance.host.calls import Call, CallHung

    try:
        Call(gc.collect).result(deadline, what="a garbage collection between checks (finalisers ran cleanup())")
    except CallHung as exc:
        logging.getLogger(__name__).warning("%s; an environment's finaliser hangs", exc)
    except Exception as exc:
        logging.getLogger(__name__).warning("a garbage collection between checks raised %s", exc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After each check's own teardown, collect what it left (see pytest_collection_finish)."""
    yield
    if not gc.isenabled() and clause_ids(item):
        collect_garbage()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    kit_contract = None
    chosen = config.stash.get(_SELECTION, None)
    if chosen is not None and chosen.clauses is not None:
        left_out = [item for item in items if clause_ids(item) and not chosen.keeps(clause_ids(item))]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            dropped = set(map(id, left_out))
            items[:] = [item for item in items if id(item) not in dropped]
    if runs_checks(config) and hasattr(config, "workerinput"):  # an xdist worker: the order decides who runs what
        items[:] = [items[i] for i in schedule.longest_first([item.nodeid for item in items])]
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
        needs = black_box_needs(item)
        if needs is not None:
            harness = verdicts.harness_capabilities(kit_contract)
            wrong = [n for n in needs if n not in harness]
            if wrong:
                raise pytest.UsageError(
                    f"{item.nodeid}: black_box names {', '.join(wrong)}, which are not harness "
                    f"capabilities (known: {', '.join(sorted(harness))})"
                )
            item.user_properties.append(("black_box", list(needs)))


# The key of a worker's xdist input that carries the preflight's host features.
_HOST_FEATURES_INPUT = "hermes_kit_host_features"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Each worker gets the host features the preflight probed: the same host in the same
    interpreter and environment, so every worker would find the same, each spending some twenty
    commands and a fraction of a second of its start on it."""
    found = node.config.stash[_STATE].host_features
    if found is not None:
        node.workerinput[_HOST_FEATURES_INPUT] = json.dumps(found)


def _given_host_features(config: pytest.Config) -> dict[str, bool] | None:
    given = getattr(config, "workerinput", {}).get(_HOST_FEATURES_INPUT)
    return {str(k): bool(v) for k, v in json.loads(given).items()} if given else None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A check run hands its checks out longest first, one at a time (conformance.schedule)."""
    return schedule.make_scheduler(config, log) if runs_checks(config) else None


def runs_checks(config: pytest.Config) -> bool:
    """Does this pytest run collect the kit's checks (by --pyargs name or by path)?"""
    return names_checks(config.args, bool(config.option.pyargs))


def names_checks(args: Any, pyargs: bool) -> bool:
    """Do these command-line arguments name the kit's checks (by --pyargs name or by path)?"""
    for arg in args:
        head = str(arg).split("::", 1)[0]
        if pyargs and (head == "conformance.checks" or head.startswith("conformance.checks.")):
            return True
        try:
            path = Path(head).resolve()
        except (OSError, ValueError):
            continue
        if path == CHECKS_DIR or CHECKS_DIR in path.parents:
            return True
    return False


# Module names outside the kit's own packages (a warnings filter matches from the start of the name).
THIRD_PARTY_MODULES = r"(?!(conformance|fakes|reference|isolation|tests)(\.|$))"


def _configure_check_run(config: pytest.Config) -> None:
    state = config.stash[_STATE]
    redact.register_environ()
    _redact_terminal(config)
    redact.redact_logging()  # a plugin's own handlers too, during the run and after the summary
    # A deprecation raised inside third-party code (a vendor SDK's use of its own dependencies)
    # is not the backend's behaviour and would bury the verdicts; the kit's own stay visible,
    # and a -W option still overrides this.
    config.addinivalue_line("filterwarnings", f"ignore::DeprecationWarning:{THIRD_PARTY_MODULES}")
    worker = hasattr(config, "workerinput")
    if not worker and not config.option.basetemp:
        # pytest keeps its last three temp roots and hypothesis writes .hypothesis/ into the
        # current directory: this run's go under a root of its own, removed at the end.
        leftovers.sweep_orphaned(Path(tempfile.gettempdir()), "hermes-kit-")  # runs that were SIGKILLed
        state.run_root = Path(tempfile.mkdtemp(prefix="hermes-kit-"))
        leftovers.claim(state.run_root)
        config.option.basetemp = str(state.run_root / "pytest")
        cache = bytecode.run_cache(state.run_root)  # inherited by the workers and the fakes' processes
        state.bytecode_restore = (bytecode.apply(cache, os.environ), bytecode.use_in_this_process(cache))
    root = state.run_root or (Path(config.option.basetemp).parent if config.option.basetemp else None)
    if root is not None and not _dist_controller(config):
        _hypothesis_home(root / "hypothesis")
    if _dist_controller(config) and not config.option.collectonly:
        preflight(config)
    progress.install(config)


def pytest_sessionstart(session: pytest.Session) -> None:
    """The log file and live-log handlers write redacted text (pytest registers them after configure)."""
    if not runs_checks(session.config):
        return
    logging_plugin = session.config.pluginmanager.get_plugin("logging-plugin")
    for name in ("log_file_handler", "log_cli_handler"):
        handler = getattr(logging_plugin, name, None)
        if handler is not None:
            redact.redact_handler(handler)


def _hypothesis_home(path: Path) -> None:
    try:
        from hypothesis import configuration
    except ImportError:
        return
    configuration.set_hypothesis_home_dir(str(path))


def _redact_terminal(config: pytest.Config) -> None:
    """Everything pytest's terminal reporter writes goes through the redactor."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    writer = getattr(reporter, "_tw", None)
    if writer is None or getattr(writer, "_kit_redacting", False):
        return
    write = writer.write

    def redacting_write(msg: str, **markup: Any) -> None:
        write(redact.redact(msg) if isinstance(msg, str) else msg, **markup)

    writer.write = redacting_write
    writer._kit_redacting = True


def setup_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean the run cannot start: one line, no traceback (conformance.errors)."""
    from conformance.errors import KitError

    return (KitError,)


def setup_error_lines(config: pytest.Config, exc: BaseException) -> list[str]:
    """What pytest prints for a setup error: one line, or none when --kit-error-file takes it as JSON."""
    import traceback

    from conformance.errors import KitError

    error = exc if isinstance(exc, KitError) else KitError(str(exc))
    path = config.option.kit_error_file
    if not path:
        return [f"hermes-backend-kit: {_one_line(redact.redact(error.one_line()))}"]
    data = {**error.to_dict(), "traceback": "".join(traceback.format_exception(exc))}
    Path(path).write_text(json.dumps(redact.redact_data(data)) + "\n", "utf-8")
    return []


def current_run(config: pytest.Config) -> Any:
    """This process's KitRun once a check has started it, else None."""
    state = config.stash.get(_STATE, None)
    return state.run if state is not None else None


def run_options(config: pytest.Config) -> Any:
    from conformance.run import CALL_DEADLINE_S, RunOptions
    from fakes.process import CONTROL_VAR

    opts = config.option
    control = opts.fake_control or os.environ.get(CONTROL_VAR) or None
    return RunOptions(
        backend=opts.backend,
        backend_config=opts.backend_config,
        host=opts.host,
        fake=opts.fake,
        live=opts.live,
        fake_control=control,
        call_deadline=opts.call_deadline or CALL_DEADLINE_S,
        client_faults=opts.client_faults,
        ignore_requires_hermes=opts.ignore_requires_hermes,
    )


def preflight(config: pytest.Config) -> None:
    """Start the run once here, in the xdist controller, before any worker: a setup error is one line."""
    from conformance.run import KitRun

    options = run_options(config)
    if options.fake_control:
        if _workers(config) > 1:
            # Its fault script and its sandbox list would be shared by the workers, each seeing the others'.
            raise pytest.UsageError(
                "hermes-backend-kit: a fake started by hand (--fake-control or "
                "HERMES_KIT_FAKE_CONTROL) serves one run at a time; run without -n (or with "
                "-n 0), or let the kit start its own fakes"
            )
        return  # attaching starts nothing; the kit fixture reports a wrong address in one line
    state = config.stash[_STATE]
    parent = state.run_root or Path(config.option.basetemp).parent
    workdir = Path(tempfile.mkdtemp(prefix="preflight-", dir=parent))
    try:
        run = KitRun.start(options, workdir)
    except setup_errors() as exc:
        raise pytest.UsageError(*setup_error_lines(config, exc)) from None
    else:
        state.host_features = dict(run.host_features)
        run.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _workers(config: pytest.Config) -> int:
    wanted = getattr(config.option, "numprocesses", None)
    if not wanted:
        return 0
    return wanted if isinstance(wanted, int) else 2  # "auto", "logical": more than one


def _one_line(text: str) -> str:
    return " ".join(text.split())


def pytest_unconfigure(config: pytest.Config) -> None:
    gc.enable()
    state = config.stash.get(_STATE, None)
    if state is None or state.run_root is None:
        return
    leftovers.end_processes_under(state.run_root)
    if state.bytecode_restore is not None:
        environ, this_process = state.bytecode_restore
        bytecode.apply(environ, os.environ)
        bytecode.restore_in_this_process(this_process)
        state.bytecode_restore = None
    shutil.rmtree(state.run_root, ignore_errors=True)
    state.run_root = None


class CheckDeadline(AssertionError):
    """A check ran past --check-deadline."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Fail a check that runs past --check-deadline (SIGALRM, on the main thread only)."""
    seconds = item.config.option.check_deadline
    usable = (
        bool(seconds)
        and seconds > 0
        and clause_ids(item)
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
    )
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CheckDeadline(
            f"the check ran past the kit's {seconds:g}s deadline (--check-deadline); the "
            "traceback shows the backend call it was waiting for"
        )

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A check stopped by a Hermes module the host lacks is unverified because of the host, not failed."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.excinfo is None or report.when == "teardown" or not clause_ids(item):
        return
    from conformance.host import abi, gaps

    module = gaps.missing_hermes_module(call.excinfo.value)
    if module is None:
        return
    host = abi.active()
    reason = gaps.unverified_reason(module, host.mode if host else None, host.hermes_version if host else None)
    path, lineno = item.reportinfo()[:2]
    report.outcome = "skipped"
    report.longrepr = (str(path), (lineno or 0) + 1, f"Skipped: {reason}")
    report.user_properties.append(("host_gap", module))


def host_gap_notes(gaps_found: dict[str, int], host: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's ``host.gaps``: one entry (and one note) per Hermes module the host lacked."""
    from conformance.host import gaps

    return [
        {
            "module": module,
            "checks": count,
            "note": gaps.note(module, host.get("mode"), host.get("hermes_version"), count),
        }
        for module, count in sorted(gaps_found.items())
    ]


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def kit(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The KitRun of this process: host, plugin, fake service, capabilities."""
    from conformance.run import KitRun

    options = run_options(request.config)
    try:
        run = KitRun.start(options, tmp_path_factory.mktemp("kit"), host_features=_given_host_features(request.config))
    except setup_errors() as exc:
        # A setup problem is one clear message, not a traceback per check.
        lines = setup_error_lines(request.config, exc)
        pytest.exit(
            lines[0] if lines else "hermes-backend-kit: the run could not start (--kit-error-file has why)",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
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
    reason = skip_reason(run, ids, black_box_needs(request.node))
    request.node.user_properties.append(("kit_context", json.dumps(run.context())))
    if reason:
        pytest.skip(reason)


def skip_reason(run: Any, ids: tuple[str, ...], black_box: tuple[str, ...] | None = None) -> str | None:
    """Why a check citing ``ids`` does not run: not applicable (backend or host), or unverified (harness).

    ``black_box``: the harness capabilities a black-box check needs itself (None: not black-box).
    """
    reason = gate_reason(run.contract, ids, run.capabilities.present, black_box)
    if reason:
        return reason
    for cid in ids:
        clause = run.contract.get(cid)
        # A host clause's feature is behaviour a BaseEnvironment subclass inherits (a duck type provides it
        # itself and is checked); a backend clause's is what the host must have to ask it of any backend.
        applies = clause.provided_by == "backend" or run.env_is_base()
        if clause.host_feature and not run.host_has(clause.host_feature) and applies:
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
    hung: list[BaseException] = []
    for env in made:
        try:
            kit.release(env)
        except AssertionError as exc:  # CallHung: cleanup() did not return; release the others first
            hung.append(exc)
    if hung:
        raise hung[0]


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

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.state.started = time.time()

    @pytest.hookimpl(tryfirst=True)  # before the terminal, junitxml and xdist see the report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        redact_report(self.config, report)
        junit.name_by_module(self.config, report)
        props: dict[str, Any] = dict(report.user_properties)  # what the kit's own checks recorded
        ids = props.get("clauses")
        if not ids:
            return
        if "kit_context" in props and not self.state.context:
            self.state.context = json.loads(props["kit_context"])
        outcome = self.state.outcomes.setdefault(
            report.nodeid, CheckOutcome(report.nodeid, tuple(ids), black_box="black_box" in props)
        )
        outcome.absorb(report.when, report.outcome, _reason(report), report.duration)
        if "host_gap" in props:
            gap = str(props["host_gap"])
            self.state.host_gaps[gap] = self.state.host_gaps.get(gap, 0) + 1

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file, so the certificate reaches it
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput") or not self.state.outcomes:
            return  # an xdist worker, or no checks ran: nothing to report
        from conformance import manifest

        complete, incomplete = manifest.completeness(self.state.outcomes)
        opts = self.config.option
        context = self.state.context
        if self.state.host_gaps:
            host = dict(context.get("host") or {"mode": None, "requested": opts.host})
            host["gaps"] = host_gap_notes(self.state.host_gaps, host)
            context = {**context, "host": host}
        self.state.report = redact.redact_data(
            build.build(
                contract.load(),
                self.state.outcomes.values(),
                context,
                duration_s=time.time() - self.state.started,
                started_at=self.state.started,
                spec=opts.backend,
                host_requested=opts.host,
                waivers=self.state.waivers,
                complete=complete,
                incomplete=incomplete,
                checks_sha256=manifest.files_digest(manifest.check_files()),
                selection=_selection_label(self.config),
            )
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
        terminalreporter.section("hermes-backend-kit: verdicts per group (clauses)")
        for line in table.render(report):
            terminalreporter.write_line(line)
        if report.get("fake_world"):
            terminalreporter.write_line(f"  fake boxes: {fake_world_line(report['fake_world'])}")
        for gap in report["host"].get("gaps") or ():
            terminalreporter.write_line(f"  {gap['note']}")
        for reason in report["incomplete_reasons"]:
            terminalreporter.write_line(f"  incomplete: {reason}")
        for error in report["errors"]:
            terminalreporter.write_line(f"  waiver error: {error}")
        for clause in report["clauses"]:
            if "waived" in clause:
                w = clause["waived"]
                terminalreporter.write_line(
                    f"  WAIVED {clause['level']} {clause['id']} ({clause['verdict']}) until "
                    f"{w['expires']}: {w['reason']} {w['issue']}"
                )
        for line in must_failure_lines(report):
            terminalreporter.write_line(f"  {line}")
        if config.option.report:
            terminalreporter.write_line(f"report written to {config.option.report}")
        # pytest's own last line follows: it counts tests, and every check is one test.
        terminalreporter.write_line(
            f"pytest's summary below counts tests: one test per check ({len(self.state.outcomes)} checks)"
        )


def redact_report(config: pytest.Config, report: Any) -> None:
    """Mask every known secret in a test report in place: its traceback, captured sections and properties.

    The report goes through pytest's own (xdist's) serialisation, every string in it redacted,
    and back, so the traceback keeps its structure (the crash message that becomes a check's
    reason, junit.xml's failure message) instead of turning into one string.
    """
    texts = [
        str(report.longrepr) if report.longrepr is not None else "",
        *(content for _, content in getattr(report, "sections", ())),
        json.dumps(getattr(report, "user_properties", []), default=str),
    ]
    if not any(redact.contains_secret(t) for t in texts):
        return
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    if data is None:
        report.longrepr = redact.redact(str(report.longrepr))
        return
    clean = config.hook.pytest_report_from_serializable(config=config, data=redact.redact_data(data))
    report.__dict__.update(clean.__dict__)


REASON_CHARS = 20_000  # more than any excerpt keeps: what a check said, bounded


def _reason(report: pytest.TestReport) -> str:
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if report.outcome == "failed":
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
        if crash:
            return str(crash)[:REASON_CHARS]  # the report keeps its start and its end (report/build.py clip)
        text = (getattr(report, "longreprtext", "") or str(report.longrepr)).strip()
        return text.splitlines()[-1][-REASON_CHARS:] if text else "failed"
    return ""

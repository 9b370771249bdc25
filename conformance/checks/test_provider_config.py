"""provider: the provider configuration extension (config-schema capability).

Hosts with the extension keep a provider's settings under
terminal.backends.<name>, pass them through resolve_config() (validated_config
requires a Mapping back), probe the dashboard picker with
probe_with_config(settings), and hand the resolved snapshot back as
config["backend_config"] to check_requirements and as backend_config= to
create_environment.  The run's settings are terminal.backends.<name> of the
run's terminal configuration (empty when none are given).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from conformance.checks._support import out, rc, returns, run
from conformance.host.calls import bounded
from conformance.host.registry import provider_base_class

PROBE_STATUSES = ("ready", "needs_setup", "unavailable")
# A value of the wrong type for each schema field type.
WRONG_VALUE: dict[str, Any] = {
    "boolean": "kit-not-a-boolean",
    "number": "kit-not-a-number",
    "list": "kit-not-a-list",
    "select": 12345,
    "string": 12345,
    "text": ["kit", "not", "text"],
    "secret": 12345,
}


def run_settings(kit) -> dict[str, Any]:
    backends = kit.terminal_config.get("backends")
    mine = backends.get(kit.provider.name) if isinstance(backends, Mapping) else None
    return copy.deepcopy(dict(mine)) if isinstance(mine, Mapping) else {}


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = tree.get(part)
        if not isinstance(child, dict):
            child = tree[part] = {}
        tree = child
    tree[leaf] = value


def wrong_settings(kit) -> dict[str, Any]:
    """Settings whose every schema field has a value of the wrong type (read off the raw schema)."""
    try:
        schema = kit.provider.get_config_schema()
    except Exception:
        schema = {}
    settings: dict[str, Any] = {}
    if isinstance(schema, Mapping):
        for key, spec in schema.items():
            kind = spec.get("type", "string") if isinstance(spec, Mapping) else "string"
            if isinstance(key, str) and key:
                _set(settings, key, WRONG_VALUE.get(kind, 12345))
    return settings or {"kit_unknown_setting": ["kit", 1]}


def snapshot(kit) -> dict[str, Any]:
    """The host's validated_config() of the run's settings (what becomes backend_config).

    A resolve_config() the host refuses is provider.resolve-config's failure; the other
    clauses then go on with a copy of the settings as given.
    """
    validate = provider_base_class().validated_config
    try:
        return dict(bounded(validate, kit.provider, run_settings(kit), deadline=10.0, what="validated_config()"))
    except AssertionError:
        raise
    except Exception:
        return run_settings(kit)


@pytest.mark.clause("provider.resolve-config")
def test_resolve_config_returns_a_mapping(kit):
    for label, settings in (("the run's settings", run_settings(kit)), ("an empty mapping", {})):
        given = copy.deepcopy(settings)
        value = returns(kit.provider.resolve_config, given, deadline=10.0, what=f"resolve_config({label})")
        assert isinstance(value, Mapping), (
            f"resolve_config({label}) returned {type(value).__name__}, not a Mapping: the host's "
            "validated_config() raises TypeError and the backend's settings cannot be used"
        )
        assert given == settings, f"resolve_config({label}) changed the mapping it was given: {given!r}"


@pytest.mark.clause("provider.probe-with-config")
def test_probe_with_config_is_bounded_and_never_raises(kit):
    cases = {
        "the resolved settings": snapshot(kit),
        "an empty mapping": {},
        "settings of the wrong types": wrong_settings(kit),
    }
    for label, settings in cases.items():
        value = returns(kit.provider.probe_with_config, settings, deadline=2.0, what=f"probe_with_config({label})")
        assert isinstance(value, tuple) and len(value) == 2, f"probe_with_config({label}) returned {value!r}"
        status, detail = value
        assert status in PROBE_STATUSES, f"probe_with_config({label}) status {status!r} is not one of {PROBE_STATUSES}"
        assert isinstance(detail, str), f"probe_with_config({label}) detail {detail!r} is not a str"


@pytest.mark.clause("provider.backend-config")
def test_check_requirements_with_and_without_backend_config(kit, caplog):
    snap = snapshot(kit)
    base = {"backend": kit.provider.name, "cwd": "/root", "timeout": 180, **kit.terminal_config}
    base.pop("backend_config", None)
    for label, config in (
        ("with backend_config", {**base, "backend_config": copy.deepcopy(snap)}),
        ("without backend_config", base),
    ):
        with caplog.at_level(logging.DEBUG):
            value = returns(kit.provider.check_requirements, config, deadline=10.0, what=f"check_requirements({label})")
        assert isinstance(value, bool), f"check_requirements({label}) returned {value!r}, not a bool"
        if "backend_config" in config:
            assert config["backend_config"] == snap, "check_requirements() changed config['backend_config']"


@pytest.mark.clause("provider.backend-config")
def test_create_environment_takes_backend_config(kit, make_env):
    snap = snapshot(kit)
    given = copy.deepcopy(snap)
    try:
        env = make_env(extra_kwargs={"backend_config": given})
    except AssertionError:
        raise
    except Exception as exc:
        raise AssertionError(
            f"create_environment(backend_config=<the validated settings>) raised {type(exc).__name__}: {exc}"
        ) from None
    result = run(env, "echo configured")
    assert rc(result) == 0 and out(result).strip() == "configured", (
        f"create_environment(backend_config=...) gave an environment that cannot run a command: {out(result)[-300:]!r}"
    )
    assert given == snap, f"create_environment() changed the backend_config it was given: {given!r}"

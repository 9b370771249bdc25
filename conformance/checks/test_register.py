"""register: how the plugin registers itself and what loading it does to Hermes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conformance.host.registry import PluginContext, ProviderRegistry, provider_base_class


@pytest.mark.clause("register.one-provider")
def test_register_adds_exactly_one_provider(kit):
    ctx = PluginContext(registry=ProviderRegistry(), plugin_name="check")
    kit.plugin.register(ctx)
    assert len(ctx.accepted) == 1, f"register(ctx) registered {len(ctx.accepted)} providers"
    assert not ctx.rejected, f"register(ctx) offered providers the host rejects: {ctx.rejected}"
    assert isinstance(ctx.accepted[0], provider_base_class())


@pytest.mark.clause("register.old-host-safe")
def test_register_survives_a_host_without_the_abi(kit):
    # Registration needs no credentials; keeping them out of the child's
    # environment keeps them out of every /proc/*/environ a sandbox can read.
    env = {k: v for k, v in os.environ.items() if k not in kit.secrets}
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.host.legacy", kit.plugin.spec],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, (
        "importing the plugin or calling register(ctx) raised on a host without "
        f"agent.terminal_env_provider:\n{proc.stderr[-1500:]}"
    )


@pytest.mark.clause("register.manifest")
def test_manifest_describes_a_backend(kit):
    manifest = kit.plugin.manifest
    assert isinstance(manifest, dict), "the plugin has no plugin.yaml next to its __init__.py"
    for key in ("name", "version", "description"):
        value = manifest.get(key)
        assert isinstance(value, str) and value.strip(), f"plugin.yaml {key} is {value!r}"
    assert manifest.get("kind") == "backend", f"plugin.yaml kind is {manifest.get('kind')!r}, not 'backend'"
    requires = manifest.get("requires_env", [])
    assert isinstance(requires, list), "plugin.yaml requires_env must be a list"
    for entry in requires:
        ok = isinstance(entry, str) or (isinstance(entry, dict) and isinstance(entry.get("name"), str))
        assert ok, f"requires_env entry {entry!r} is neither a name nor a mapping with a name"


@pytest.mark.clause("register.lookup-any-case")
def test_lookup_in_any_case_and_consistent_stamp(kit, env):
    name = kit.provider.name
    for variant in (name.lower(), name.upper(), name.swapcase(), f"  {name}  "):
        assert kit.registry.get(variant) is kit.provider, f"lookup of {variant!r} missed the provider"
    assert getattr(env, "_hermes_backend_name", None) == name.strip().lower()


@pytest.mark.clause("register.no-core-override")
def test_loading_leaves_hermes_modules_alone(kit):
    assert not kit.plugin.core_changes, f"loading the plugin changed Hermes: {kit.plugin.core_changes}"


@pytest.mark.clause("register.entry-point")
def test_entry_point_matches_manifest(kit):
    manifest_name = (kit.plugin.manifest or {}).get("name")
    assert manifest_name == kit.plugin.entry_point, (
        f"entry point {kit.plugin.entry_point!r} differs from plugin.yaml name {manifest_name!r}"
    )


HERMES_LOAD_DEADLINE_S = 10.0  # plugins.load_timeout_seconds's default


@pytest.mark.clause("register.load-deadline")
def test_loading_finishes_within_hermess_load_deadline(kit):
    assert kit.plugin.load_seconds < HERMES_LOAD_DEADLINE_S, (
        f"importing the plugin and register(ctx) took {kit.plugin.load_seconds:.1f}s: Hermes gives a plugin "
        f"{HERMES_LOAD_DEADLINE_S:.0f}s (plugins.load_timeout_seconds), then skips it"
    )


@pytest.mark.clause("register.import-light")
def test_loading_is_fast_and_offline(kit):
    assert not kit.plugin.network_attempts, f"loading tried the network: {kit.plugin.network_attempts}"
    assert kit.plugin.load_seconds < 2.0, f"loading took {kit.plugin.load_seconds:.2f}s"

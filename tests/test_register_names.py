"""A register_* name Hermes's PluginContext does not have fails loading, naming the closest valid one;
every name Hermes has is still accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.host.loader import LoadError, load
from conformance.host.registry import HERMES_REGISTER_NAMES, PluginContext, ProviderRegistry

MANIFEST = "name: typo-box\nversion: 1.0.0\ndescription: d\nkind: backend\n"


def _plugin(tmp_path: Path, body: str) -> Path:
    directory = tmp_path / "typo_box"
    directory.mkdir()
    (directory / "plugin.yaml").write_text(MANIFEST)
    (directory / "__init__.py").write_text(body)
    return directory


def test_every_hermes_register_name_is_accepted():
    ctx = PluginContext(registry=ProviderRegistry(), plugin_name="demo")
    for name in sorted(HERMES_REGISTER_NAMES - {"register_terminal_environment_provider"}):
        getattr(ctx, name)("anything")
    assert sorted(ctx.other_calls) == sorted(HERMES_REGISTER_NAMES - {"register_terminal_environment_provider"})
    assert ctx.unknown_names == []


def test_an_unknown_register_name_raises_naming_the_closest():
    ctx = PluginContext(registry=ProviderRegistry(), plugin_name="demo")
    with pytest.raises(
        AttributeError,
        match=r"no register_terminal_provider\(\); the closest valid name is "
        r"register_terminal_environment_provider",
    ):
        ctx.register_terminal_provider(object())
    assert getattr(ctx, "register_tools", None) is None  # feature detection sees it missing, as on Hermes
    assert ctx.unknown_names == ["register_terminal_provider", "register_tools"]


def test_a_misspelled_call_fails_loading_with_the_closest_name(tmp_path, builtin_host):
    body = (
        "def register(ctx):\n"
        "    from fakes.tempdir_box.box_provider import TempdirBoxProvider\n"
        "    ctx.register_terminal_provider(TempdirBoxProvider())\n"
    )
    with pytest.raises(LoadError) as caught:
        load(str(_plugin(tmp_path, body)), ProviderRegistry())
    message = str(caught.value)
    assert "\n" not in message
    assert "failed in register(ctx): AttributeError" in message
    assert "the closest valid name is register_terminal_environment_provider" in message


def test_a_feature_check_of_a_misspelled_name_says_why_nothing_registered(tmp_path, builtin_host):
    body = (
        "def register(ctx):\n"
        "    add = getattr(ctx, 'register_terminal_env_provider', None)\n"
        "    if add is not None:\n"
        "        add(None)\n"
    )
    with pytest.raises(
        LoadError,
        match=r"registered no terminal provider .*no register_terminal_env_provider\(\); "
        r"the closest valid name is register_terminal_environment_provider",
    ):
        load(str(_plugin(tmp_path, body)), ProviderRegistry())

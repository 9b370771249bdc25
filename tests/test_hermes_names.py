"""The names released Hermes trees export, and what the kit makes of an import of one the host lacks."""

from __future__ import annotations

import importlib

import pytest

from conformance.host import gaps, hermes_names
from conformance.host.registry import PluginContext, ProviderRegistry
from tests.conftest import ROOT


def _pinned_releases() -> set[str]:
    """The Hermes releases the noxfile installs as hosts."""
    text = (ROOT / "noxfile.py").read_text()
    return {release for release in ("0.19.0", "0.22.2.post1") if release in text}


def test_the_record_holds_every_release_the_noxfile_runs_as_a_host():
    assert set(hermes_names.releases()) >= _pinned_releases() and _pinned_releases()


@pytest.mark.parametrize(
    "module, name",
    [
        ("hermes_cli.config", "fast_safe_load"),
        ("hermes_constants", "hermes_home_key"),
        ("hermes_cli.config", "cfg_get"),
        ("hermes_constants", "get_hermes_home"),
    ],
)
def test_names_real_plugins_import_are_released_and_stood_in(module, name):
    """A plugin that imports them works on the builtin host: the stand-ins have every such name."""
    assert hermes_names.exporting(module, name)
    standin = importlib.import_module(
        {"hermes_cli.config": "conformance.host.standins.hermes_cli_config"}.get(
            module, f"conformance.host.standins.{module}"
        )
    )
    assert hasattr(standin, name)


def test_a_name_some_release_has_is_the_hosts_gap_and_names_the_release():
    exc = ImportError("cannot import name 'hermes_home_key' from 'hermes_constants' (/x/hermes_constants.py)")
    gap = gaps.missing_hermes_module(exc)
    assert gap == "hermes_constants:hermes_home_key"
    reason = gaps.unverified_reason(gap, "hermes", "0.19.0")
    assert reason.startswith("unverified (host: the backend imports 'hermes_home_key' from the Hermes module")
    assert "Hermes 0.22.2.post1 has it" in reason and "0.19.0" in reason


def test_a_name_no_release_has_is_no_gap_but_the_plugins_mistake():
    exc = ImportError("cannot import name 'load_config_everywhere' from 'hermes_cli.config' (/x/config.py)")
    assert gaps.missing_hermes_module(exc) is None
    assert gaps.unknown_hermes_name(exc) == ("hermes_cli.config", "load_config_everywhere")
    vendor = ImportError("cannot import name 'Client' from 'acme_sdk' (/x/acme_sdk.py)")
    assert gaps.missing_hermes_module(vendor) is None and gaps.unknown_hermes_name(vendor) is None


def test_names_are_read_from_the_source_without_importing_it(tmp_path):
    package = tmp_path / "hermes_cli"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "config.py").write_text(
        "raise SystemExit('imported')\n"
        "import os as _os\n"
        "from utils import fast_safe_load\n"
        "try:\n    import yaml\nexcept ImportError:\n    yaml = None\n"
        "if True:\n    LIMIT: int = 3\n"
        "def load_config():\n    inner = 1\n"
        "class Settings:\n    field = 2\n"
    )
    names = hermes_names.names_in(tmp_path, "hermes_cli.config")
    assert names == {"_os", "fast_safe_load", "yaml", "LIMIT", "load_config", "Settings"}
    assert hermes_names.names_in(tmp_path, "hermes_cli.nowhere") is None
    data = hermes_names.record(tmp_path, "9.9.9", {"releases": ["0.19.0"], "modules": {}})
    assert data["releases"] == ["0.19.0", "9.9.9"]
    assert data["modules"]["hermes_cli.config"]["load_config"] == ["9.9.9"]


def test_plugin_settings_are_read_by_key_as_hermes_reads_them():
    ctx = PluginContext(registry=ProviderRegistry(), plugin_name="demo", config={"retry": {"policy": "fast"}})
    assert ctx.get_config("retry.policy") == "fast"
    assert ctx.get_config("retry.limit", 3) == 3
    assert ctx.get_config("region", "eu-1") == "eu-1"
    for bad in ("", "../other", "a..b", "plugins/x"):
        with pytest.raises(ValueError, match="plugin-relative settings key"):
            ctx.get_config(bad)


def _tree(tmp_path, constants: str):
    (tmp_path / "hermes_cli").mkdir()
    (tmp_path / "hermes_cli" / "__init__.py").write_text('__version__ = "9.9.9"\n')
    (tmp_path / "hermes_constants.py").write_text(constants)
    return tmp_path


def test_host_diff_fails_on_a_signature_the_stand_in_does_not_share_until_it_is_reviewed(tmp_path, monkeypatch):
    from conformance.host import surface_diff

    tree = _tree(
        tmp_path,
        "def get_hermes_home():\n    pass\n"
        "def hermes_home_key(path=None, *, strict=False):\n    pass\n"
        "def get_process_hermes_home():\n    pass\n",
    )
    assert surface_diff.tree_release(tree) == "9.9.9"
    lines, status = surface_diff.check(tree, "9.9.9")
    assert status == 1
    assert lines[0] == "NEW  hermes_constants.hermes_home_key: stand-in (path=), tree (path=, *, strict=)"
    monkeypatch.setattr(
        surface_diff, "reviewed", lambda release: {"hermes_constants.hermes_home_key": "strict is Hermes's own"}
    )
    lines, status = surface_diff.check(tree, "9.9.9")
    assert status == 0 and lines[0].startswith("ok   hermes_constants.hermes_home_key")


def test_host_diff_names_a_plugin_imported_name_the_stand_in_lacks_and_a_review_gone_stale(tmp_path, monkeypatch):
    from conformance.host import surface_diff

    monkeypatch.setitem(
        hermes_names.PLUGIN_IMPORTS, "hermes_constants", frozenset({"get_hermes_home", "profile_home_for"})
    )
    monkeypatch.setattr(surface_diff, "reviewed", lambda release: {"hermes_constants.gone_name": "was different"})
    tree = _tree(tmp_path, "def get_hermes_home():\n    pass\ndef profile_home_for(name):\n    pass\n")
    lines, status = surface_diff.check(tree, "9.9.9")
    assert status == 1
    missing = "hermes_constants.profile_home_for: plugins import it, the tree has it (name), the stand-in lacks it"
    assert f"NEW  {missing}" in lines
    assert any(line.startswith("GONE hermes_constants.gone_name: reviewed for 9.9.9") for line in lines)

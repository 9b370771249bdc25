"""The builtin host's hermes_cli.config, hermes_constants and agent.file_safety, read from a real Hermes home."""

from __future__ import annotations

import importlib
import os
import stat
import subprocess
import sys
import textwrap

import pytest
import yaml

from conformance.host import gaps, loader
from conformance.host.registry import ProviderRegistry
from conformance.run import _make_hermes_home
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("builtin_host")


@pytest.fixture
def config():
    return importlib.import_module("hermes_cli.config")


@pytest.fixture
def home(tmp_path, monkeypatch):
    path = tmp_path / "hermes-home"
    path.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(path))
    return path


def _write(home, text: str) -> None:
    (home / "config.yaml").write_text(textwrap.dedent(text), "utf-8")


def test_the_stand_ins_are_the_hermes_names(config):
    assert getattr(config, "__kit_standin__", False)
    for name in ("hermes_constants", "agent.file_safety"):
        assert getattr(importlib.import_module(name), "__kit_standin__", False), name


def test_load_config_reads_the_backend_section_merged_over_hermes_defaults(config, home, monkeypatch):
    monkeypatch.setenv("HS_REGION_TOKEN", "tok-123")
    monkeypatch.delenv("HS_UNSET_VAR", raising=False)
    _write(
        home,
        """\
        terminal:
          timeout: 60
          acme_box:
            region: eu-1
            token: ${HS_REGION_TOKEN}
            other: ${env:HS_UNSET_VAR}
        agent:
          max_turns: 7
        """,
    )
    assert config.get_config_path() == home / "config.yaml"
    loaded = config.load_config()
    assert config.cfg_get(loaded, "terminal", "acme_box") == {
        "region": "eu-1",
        "token": "tok-123",
        "other": "${env:HS_UNSET_VAR}",  # an unset reference stays as written, as in Hermes
    }
    assert loaded["terminal"]["timeout"] == 60  # the file wins
    assert loaded["terminal"]["container_persistent"] is True  # a default the file does not set
    assert loaded["agent"] == {"max_turns": 7}
    loaded["terminal"]["acme_box"]["region"] = "changed"
    assert config.load_config()["terminal"]["acme_box"]["region"] == "eu-1"  # every call is a fresh copy
    assert config.read_raw_config()["terminal"]["acme_box"]["token"] == "${HS_REGION_TOKEN}"  # raw: no expansion
    assert "container_persistent" not in config.read_raw_config()["terminal"]  # raw: no defaults
    assert config.read_user_config_raw() == config.read_raw_config()


def test_an_empty_section_keeps_its_defaults(config, home):
    _write(home, "terminal:\n")
    assert config.load_config()["terminal"] == config.DEFAULT_CONFIG["terminal"]


def test_cfg_get_never_raises_and_keeps_an_explicit_none(config):
    cfg = {"terminal": {"acme_box": {"region": None}, "cwd": "/w"}}
    assert config.cfg_get(cfg, "terminal", "acme_box", "region", default="x") is None
    assert config.cfg_get(cfg, "terminal", "acme_box", "zone", default="z") == "z"
    assert config.cfg_get(cfg, "terminal", "cwd", "deeper", default=0) == 0
    assert config.cfg_get(None, "terminal", default="d") == "d"
    assert config.cfg_get(cfg) is cfg


def test_a_missing_file_is_the_defaults(config, home):
    assert config.load_config() == config.DEFAULT_CONFIG
    assert config.load_config() is not config.DEFAULT_CONFIG
    assert config.read_raw_config() == {}
    assert config.read_user_config_raw() == {}
    config.require_parseable_user_config()  # a first run has no file: nothing to refuse


@pytest.mark.parametrize(
    "text, problem",
    [
        ("terminal:\n  acme_box: [unclosed\n", "not valid YAML (line 3, column 1"),
        ("- just\n- a list\n", "the top level is a list, not a mapping"),
    ],
)
def test_an_unusable_file_is_reported_once_and_the_defaults_serve(config, home, capsys, text, problem):
    (home / "config.yaml").write_text(text, "utf-8")
    assert config.load_config() == config.DEFAULT_CONFIG
    assert config.read_raw_config() == {}
    err = capsys.readouterr().err
    assert err.count("hermes config:") == 1, err  # one message per version of the file
    assert f"{home / 'config.yaml'} is unusable: {problem}" in err
    assert "using the default configuration until it is fixed: edit it into a YAML mapping of sections" in err
    with pytest.raises(config.InvalidUserConfigError) as caught:
        config.require_parseable_user_config()
    assert f"{home / 'config.yaml'} is unusable: {problem}" in str(caught.value)
    assert "set HERMES_IGNORE_USER_CONFIG=1 to run with the defaults" in str(caught.value)


def test_a_file_that_breaks_later_keeps_the_last_good_configuration(config, home, capsys):
    _write(home, "terminal:\n  acme_box:\n    region: eu-1\n")
    assert config.load_config()["terminal"]["acme_box"]["region"] == "eu-1"
    _write(home, "terminal:\n  acme_box: {region: [\n")
    assert config.load_config()["terminal"]["acme_box"]["region"] == "eu-1"
    assert "using the configuration loaded before it broke" in capsys.readouterr().err
    with pytest.raises(yaml.YAMLError):
        config.read_user_config_raw()  # the raw reader has no fallback, as in Hermes


def test_get_env_value_prefers_the_environment_then_the_home_env_file(config, home, monkeypatch):
    (home / ".env").write_text(
        "# credentials\nexport HS_A=from-file\nHS_B=\"quoted value\"\nHS_C='single'\nHS_D=plain # note\n", "utf-8"
    )
    for name in ("HS_A", "HS_B", "HS_C", "HS_D"):
        monkeypatch.delenv(name, raising=False)
    assert config.load_env() == {"HS_A": "from-file", "HS_B": "quoted value", "HS_C": "single", "HS_D": "plain"}
    assert config.get_env_value("HS_A") == "from-file"
    monkeypatch.setenv("HS_A", "from-environ")
    assert config.get_env_value("HS_A") == "from-environ"
    assert config.get_env_value("HS_NOWHERE") is None


@pytest.mark.parametrize(
    "relative, root",
    [("plain", "plain"), ("store/profiles/work", "store"), ("store/profiles", "store/profiles")],
)
def test_hermes_home_and_root_follow_the_profile_layout(tmp_path, monkeypatch, relative, root):
    constants = importlib.import_module("hermes_constants")
    file_safety = importlib.import_module("agent.file_safety")
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / relative))
    assert constants.get_hermes_home() == tmp_path / relative == file_safety._hermes_home_path()
    assert constants.get_default_hermes_root() == tmp_path / root == file_safety._hermes_root_path()
    assert constants.get_config_path() == tmp_path / relative / "config.yaml"
    assert constants.get_env_path() == tmp_path / relative / ".env"
    assert constants.display_hermes_home() == str(tmp_path / relative)


def test_the_runs_hermes_home_carries_the_terminal_settings_as_hermes_writes_them(config, tmp_path, monkeypatch):
    terminal = {"cwd": "/workspace", "config_box": {"root": "/srv/boxes", "size": "small"}, "timeout": 90}
    home = _make_hermes_home(tmp_path / "hermes-home", terminal)
    monkeypatch.setenv("HERMES_HOME", str(home))
    path = home / "config.yaml"
    assert config.cfg_get(config.load_config(), "terminal", "config_box") == {"root": "/srv/boxes", "size": "small"}
    text = path.read_text("utf-8")
    # block style, keys in the order they were set (Hermes does not sort), owner-only
    assert text.index("cwd:") < text.index("config_box:") < text.index("timeout:") < text.index("credential_files:")
    assert "{" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p.name for p in home.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    "exc, module",
    [
        (ModuleNotFoundError("No module named 'hermes_cli.x'", name="hermes_cli.x"), "hermes_cli.x"),
        (ModuleNotFoundError("No module named 'gateway'", name="gateway"), "gateway"),
        (ModuleNotFoundError("No module named 'sprites'", name="sprites"), None),  # a vendor SDK: the backend's
        (ModuleNotFoundError("No module named 'hermes_plugins.x.y'", name="hermes_plugins.x.y"), None),
        (ModuleNotFoundError("No module named 'utils'", name="utils"), None),
        (AssertionError("create_environment raised: No module named 'agent.newer_thing'"), "agent.newer_thing"),
        (AssertionError("exit 1: No module named 'requests'"), None),
        (RuntimeError("plain failure"), None),
    ],
)
def test_only_a_missing_hermes_module_is_a_host_gap(exc, module):
    assert gaps.missing_hermes_module(exc) == module


def test_a_host_gap_is_found_through_the_exception_chain():
    try:
        try:
            import hermes_cli.nonexistent_thing  # noqa: F401
        except ImportError as inner:
            raise RuntimeError("sandbox setup failed") from inner
    except RuntimeError as outer:
        assert gaps.missing_hermes_module(outer) == "hermes_cli.nonexistent_thing"


def test_a_plugin_that_imports_a_missing_hermes_module_at_import_time_is_one_setup_error(tmp_path):
    plugin = tmp_path / "needs_newer_hermes"
    plugin.mkdir()
    (plugin / "plugin.yaml").write_text("name: needs-newer-hermes\nversion: 0.1.0\nkind: backend\n")
    (plugin / "__init__.py").write_text(
        "from hermes_cli.nonexistent_thing import anything  # noqa: F401\n\ndef register(ctx):\n    pass\n"
    )
    with pytest.raises(loader.LoadError) as caught:
        loader.load(str(plugin), ProviderRegistry())
    assert caught.value.what == (
        f"loading backend {str(plugin)!r} failed in importing it: it imports the Hermes module "
        "'hermes_cli.nonexistent_thing', which the kit's builtin host does not provide (the host's gap, "
        "not the backend's)"
    )
    assert caught.value.fix == "run with --host hermes under a hermes-agent that has hermes_cli.nonexistent_thing"


def test_a_missing_vendor_sdk_stays_the_backends_load_failure(tmp_path):
    plugin = tmp_path / "needs_sdk"
    plugin.mkdir()
    (plugin / "__init__.py").write_text("import kit_no_such_vendor_sdk  # noqa: F401\n")
    with pytest.raises(loader.LoadError, match="install what provides the module 'kit_no_such_vendor_sdk'"):
        loader.load(str(plugin), ProviderRegistry())


def test_a_hermes_host_without_the_config_module_gets_the_stand_in(tmp_path):
    """--host hermes on an installed Hermes that lacks hermes_cli.config: the kit supplies it, reading HERMES_HOME."""
    tree = tmp_path / "site"
    for package in ("agent", "tools", "tools/environments", "hermes_cli"):
        (tree / package).mkdir(parents=True)
        (tree / package / "__init__.py").write_text("")
    (tree / "tools" / "environments" / "base.py").write_text("class BaseEnvironment:\n    pass\n")
    (tree / "hermes_constants.py").write_text(
        "import os\nfrom pathlib import Path\n\ndef get_hermes_home():\n    return Path(os.environ['HERMES_HOME'])\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("terminal:\n  acme_box:\n    region: eu-1\n")
    script = textwrap.dedent(
        """\
        from conformance.host import abi
        info = abi.install("hermes")
        import hermes_cli.config as config
        print(sorted(n for n in info.shimmed if n in ("hermes_cli.config", "agent.file_safety", "hermes_constants")))
        print(config.cfg_get(config.load_config(), "terminal", "acme_box", "region"))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)]), "HERMES_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["['agent.file_safety', 'hermes_cli.config']", "eu-1"]

"""The persistent directory a backend declares: where it is read from, what is refused, how it reaches a shell."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance import config, persistent_path
from conformance.persistent_path import PersistentPathError
from tests.conftest import run_suite


def _kit(*, config_value=None, attr=None, manifest=None):
    provider = SimpleNamespace() if attr is None else SimpleNamespace(conformance_persistent_path=attr)
    return SimpleNamespace(
        backend_config=config.BackendConfig(persistent_path=config_value),
        provider=provider,
        plugin=SimpleNamespace(manifest=manifest),
    )


def test_the_first_source_that_names_a_path_speaks_for_the_backend():
    yaml = {"conformance": {"persistent_path": "/from-yaml"}}
    env = SimpleNamespace(cwd="/from-cwd")
    assert (
        persistent_path.of(_kit(config_value="/cfg", attr="/attr", manifest=yaml), env).describe()
        == "/cfg (backend-config persistent_path)"
    )
    assert persistent_path.of(_kit(attr="/attr", manifest=yaml), env).path == "/attr"
    assert persistent_path.of(_kit(manifest=yaml), env).declared_by == "plugin.yaml conformance.persistent_path"
    assert persistent_path.of(_kit(), env).describe() == "/from-cwd (default: the environment's cwd)"
    assert persistent_path.of(_kit(), SimpleNamespace(cwd="")).path == "~"


@pytest.mark.parametrize("value", ["workspace", "", "~user/x", "/a\nb", 42])
def test_a_path_that_is_not_absolute_or_home_is_refused_naming_where(value):
    with pytest.raises(PersistentPathError, match="provider attribute conformance_persistent_path"):
        persistent_path.of(_kit(attr=value), SimpleNamespace(cwd="/w"))


def test_the_backend_config_key_is_read_and_checked(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("persistent_path: /workspace\n")
    assert config.load(str(good), set()).persistent_path == "/workspace"
    bad = tmp_path / "bad.yaml"
    bad.write_text("persistent_path: [1]\n")
    with pytest.raises(config.BackendConfigError, match="persistent_path must be a non-empty path string"):
        config.load(str(bad), set())
    bad.write_text("persistent_path: workspace\n")
    with pytest.raises(config.BackendConfigError, match="persistent_path 'workspace' must be an absolute path"):
        config.load(str(bad), set())


def test_paths_reach_a_real_shell_as_one_word(tmp_path: Path):
    home = tmp_path / "home"
    (home / "sub dir").mkdir(parents=True)
    odd = tmp_path / "it's here"
    odd.mkdir()
    cases = [("~", home), ("~/sub dir", home / "sub dir"), (str(odd), odd)]
    for declared, expected in cases:
        where = persistent_path.PersistentPath(declared, "test")
        script = f"printf x > {where.file('f;rm -rf x')} && cat {where.file('f;rm -rf x')}"
        done = subprocess.run(
            ["bash", "-c", script],
            env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0 and done.stdout == "x", (declared, done.stderr)
        assert (expected / "f;rm -rf x").read_text() == "x"


@pytest.mark.suite
def test_a_bad_declaration_stops_the_run_in_one_line(tmp_path):
    plugin = tmp_path / "keeps_nothing"
    plugin.mkdir()
    (plugin / "plugin.yaml").write_text('name: keeps_nothing\nversion: "1.0"\ndescription: d\nkind: backend\n')
    (plugin / "__init__.py").write_text(
        "from fakes.tempdir_box.box_provider import TempdirBoxProvider\n\n\n"
        "class Provider(TempdirBoxProvider):\n"
        "    name = 'keeps_nothing'\n"
        "    conformance_persistent_path = 'workspace'\n\n\n"
        "def register(ctx):\n"
        "    ctx.register_terminal_environment_provider(Provider())\n"
    )
    run = run_suite("--backend", str(plugin), "--fake", "tempdir", "-k", "test_persist", cwd=tmp_path, workers=0)
    assert run.returncode == 4, run.output[-1500:]
    assert (
        "hermes-backend-kit: the provider attribute conformance_persistent_path 'workspace' must be an absolute path"
    ) in run.output
    assert "Traceback" not in run.output

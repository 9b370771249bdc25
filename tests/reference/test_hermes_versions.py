"""Which Hermes releases each reference plugin declares, and what a user on an older one sees.

The floor is the contract's ``requires_hermes``; each plugin.yaml repeats it for Hermes to
read, each README states it, and a Hermes from before terminal backend plugins (which does
not read the field) gets one warning naming it.  The plugins are imported in a real child
interpreter whose ``agent`` package is 0.19.0's shape: present, without the provider ABI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from conformance import backends, contract

BACKENDS = backends.REFERENCE_BACKENDS
ROOT = Path(__file__).resolve().parents[2]
FLOOR = contract.load().requires_hermes


def _manifest(backend: str) -> dict:
    return yaml.safe_load((resources.files(f"reference.{backend}") / "plugin.yaml").read_text(encoding="utf-8"))


def test_contract_names_a_floor():
    assert FLOOR is not None and FLOOR.startswith(">=")


@pytest.mark.parametrize("backend", BACKENDS)
def test_plugin_yaml_declares_the_contracts_floor(backend):
    manifest = _manifest(backend)
    assert manifest.get("requires_hermes") == FLOOR, f"reference/{backend}/plugin.yaml: requires_hermes"
    # Version 1: an installer that rejects newer manifest versions still installs it.
    assert manifest.get("manifest_version") == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_readme_states_the_supported_releases(backend):
    text = (ROOT / "reference" / backend / "README.md").read_text(encoding="utf-8")
    release = FLOOR[2:]
    assert f"Works with Hermes {release} and later" in text
    assert f'requires_hermes: "{FLOOR}"' in text
    assert f"{backend} needs Hermes {release} or later" in text


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("host", ["no-hermes", "hermes-0.19-shape"])
def test_older_hermes_gets_one_warning_naming_the_floor(backend, host, tmp_path):
    if host == "hermes-0.19-shape":
        # 0.19.0 has an ``agent`` package, but no agent.terminal_env_provider.
        (tmp_path / "agent").mkdir()
        (tmp_path / "agent" / "__init__.py").write_text("")
    script = (
        "import logging\n"
        "logging.basicConfig(format='%(levelname)s %(message)s')\n"
        "class Ctx:\n"
        "    registered = []\n"
        "    def register_terminal_environment_provider(self, provider):\n"
        "        self.registered.append(provider)\n"
        f"import reference.{backend} as plugin\n"
        "ctx = Ctx()\n"
        "plugin.register(ctx)\n"
        "print('registered', len(ctx.registered))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "registered 0"
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, run.stderr
    assert f"{backend} needs Hermes {FLOOR[2:]} or later" in warnings[0]
    assert "Upgrade Hermes" in warnings[0]
    assert "Traceback" not in run.stderr


def test_a_hermes_without_the_register_method_is_told_the_floor():
    """A ctx without register_terminal_environment_provider (the method arrived with the ABI)."""
    import logging

    from reference.common.plugin import register_provider

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("reference.deepinfra")
    logger.addHandler(handler)
    try:
        register_provider(object(), "deepinfra", lambda: object())
    finally:
        logger.removeHandler(handler)
    assert [r.levelname for r in records] == ["WARNING"]
    assert f"needs Hermes {FLOOR[2:]} or later" in records[0].getMessage()


@pytest.mark.parametrize("release, registered", [("0.21.2", 0), ("0.21.3", 1), ("0.23.5", 1)])
def test_a_pip_installed_plugin_checks_the_running_release_itself(release, registered, tmp_path):
    """Hermes reads requires_hermes only for directory plugins: on a release with the provider ABI but
    below the floor, the plugin registers nothing and says why."""
    script = (
        "import logging, sys\n"
        "logging.basicConfig(format='%(levelname)s %(message)s')\n"
        "from conformance.host import abi\n"
        "abi.install('builtin')\n"
        # A Hermes of this release with the provider ABI: the kit's modules, without the kit's marks.
        "for module in list(sys.modules.values()):\n"
        "    if getattr(module, '__kit_standin__', False):\n"
        "        module.__kit_standin__ = False\n"
        f"sys.modules['hermes_cli'].__version__ = {release!r}\n"
        "class Ctx:\n"
        "    registered = []\n"
        "    def register_terminal_environment_provider(self, provider):\n"
        "        self.registered.append(provider)\n"
        "import reference.upstash_box as plugin\n"
        "ctx = Ctx()\n"
        "plugin.register(ctx)\n"
        "print('registered', len(ctx.registered))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"registered {registered}", run.stderr
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    if registered:
        assert not warnings, run.stderr
    else:
        assert warnings == [
            f"WARNING upstash_box needs Hermes {FLOOR[2:]} or later: this is Hermes {release}; not registered. "
            "Upgrade Hermes (hermes update)"
        ]

"""An SDK taken away as on a machine that never had it, and a plugin judged by what it does there."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, certify

PLUGIN = ROOT / "fakes" / "plugins" / "sdk_probe_box"


def test_a_hidden_sdk_is_missing_every_way_a_plugin_can_look():
    script = textwrap.dedent(
        """
        import importlib.metadata, importlib.util, json, sys
        import upstash_box  # imported before: hiding must also forget it
        from conformance.host.without_sdk import hide
        hide(["upstash_box"], ["upstash-box"])
        seen = {"in_sys_modules": "upstash_box" in sys.modules, "find_spec": importlib.util.find_spec("upstash_box")}
        try:
            import upstash_box.client
        except ModuleNotFoundError as exc:
            seen["import"] = ["ModuleNotFoundError", exc.name]
        try:
            importlib.metadata.version("upstash-box")
        except importlib.metadata.PackageNotFoundError:
            seen["metadata"] = "PackageNotFoundError"
        seen["others"] = importlib.metadata.version("PyYAML") != "" and __import__("yaml") is not None
        print(json.dumps(seen))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "in_sys_modules": False,
        "find_spec": None,
        "import": ["ModuleNotFoundError", "upstash_box"],
        "metadata": "PackageNotFoundError",
        "others": True,
    }


@pytest.mark.suite
def test_a_plugin_that_looks_in_sys_modules_and_names_only_its_sdk_passes_unconfigured(tmp_path):
    run = certify(
        "--backend",
        PLUGIN,
        "--fake",
        "tempdir",
        "--select",
        "provider.unconfigured",
        out=tmp_path / "out",
        cwd=tmp_path,
    )
    assert run.done.returncode == 0, run.output()
    assert run.verdicts()["provider.unconfigured"] == "pass"


def test_what_every_hermes_machine_has_is_never_the_sdk_taken_away(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from conformance.checks.test_unconfigured import _sdk_modules

    package = tmp_path / "httpx_and_sdk_box"
    package.mkdir()
    (package / "__init__.py").write_text("")
    imports = "".join(f"import {name}\n" for name in ("httpx", "websockets", "yaml", "upstash_box"))
    (package / "provider.py").write_text(imports + "\n\nclass P:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__("httpx_and_sdk_box.provider", fromlist=["P"])
    # httpx, websockets and PyYAML ship with hermes-agent: only the vendor SDK is one a user may lack.
    assert list(_sdk_modules(SimpleNamespace(provider=module.P()))) == ["upstash_box"]


def test_a_provider_the_kit_defines_is_read_in_its_own_file_only():
    from types import SimpleNamespace

    import conformance.hermes_builtins
    from conformance.checks.test_unconfigured import _sdk_modules

    builtin = type("HermesBuiltinProvider", (), {"__module__": conformance.hermes_builtins.__name__})
    # Hermes's built-ins live in the kit's package; the kit's other modules' imports are not theirs.
    assert _sdk_modules(SimpleNamespace(provider=builtin())) == {}

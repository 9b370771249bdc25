"""The checks' generated inputs depend on the kit's version, not on where the kit or the plugin is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("patched", [False, True])
def test_local_modules_constants_are_not_mixed_into_the_inputs(tmp_path, patched):
    (tmp_path / "vendor_plugin_module.py").write_text('MARK = "kitmark7f3a"\n')
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import vendor_plugin_module
        from conformance import plugin
        from hypothesis.internal.conjecture import providers
        if {patched}:
            plugin._without_local_constants()
        print(json.dumps(sorted(providers._get_local_constants().set_for_type("string"))))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    strings = json.loads(done.stdout)
    # Unpatched, hypothesis reads the local module's source (the test could fail); patched, it reads none.
    assert ("kitmark7f3a" in strings) is not patched

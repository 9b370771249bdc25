"""junit.xml names each check's class by its module, not by the path the kit is installed at."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conformance import suite_command
from tests.conftest import ROOT


@pytest.mark.suite
def test_classnames_leave_out_the_path_from_the_rootdir(tmp_path):
    # The kit's checks sit below the rootdir (as in a venv under the working directory): the node
    # ids then start with that path ("main/conformance/checks/...").
    junit = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TEMPDIR_BOX_", "HERMES_"))}
    env["TEMPDIR_BOX_ROOT"] = str(tmp_path / "boxes")
    proc = subprocess.run(
        suite_command.command(
            "--backend",
            "fakes.tempdir_box:provider",
            "-k",
            "test_exec_properties",
            "--rootdir",
            str(ROOT.parent),
            "--junitxml",
            str(junit),
            "-o",
            "junit_family=xunit1",
        ),  # xunit1 keeps the file attribute
        cwd=ROOT.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert junit.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = ET.parse(junit).getroot().iter("testcase")
    seen = [(c.get("classname"), c.get("file")) for c in cases]
    assert seen, proc.stdout[-3000:]
    assert all(file.startswith(f"{ROOT.name}/conformance/checks/") for _, file in seen), seen  # the path was there
    assert all(name.startswith("conformance.checks.test_exec_properties") for name, _ in seen), seen

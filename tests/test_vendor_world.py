"""A plugin's own view of its sandboxes (conformance_world) stands in for a fake's world in a live run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance import vendor_world
from tests.conftest import ROOT

PLUGIN = ROOT / "fakes" / "plugins" / "world_hook_box"
CLI = (sys.executable, "-m", "conformance.cli")


class _Listing:
    def sandboxes(self):
        return {"b1": "running"}

    def read_file(self, sandbox_id, path):
        return "nonce-1" if (sandbox_id, path) == ("b1", "~/.kit-x") else None


class _Steering(_Listing):
    def pause(self, sandbox_id):
        return f"paused {sandbox_id}"

    def delete(self, sandbox_id):
        return f"deleted {sandbox_id}"


class _Provider:
    def __init__(self, hook):
        self.conformance_world = hook


def test_a_hook_that_lists_and_reads_is_a_world_and_one_that_also_steers_has_world_states():
    listing = vendor_world.from_provider(_Provider(_Listing()))
    assert listing is not None and listing.capabilities == {"world"}
    assert listing.locate(".kit-x", "nonce-1") == "b1" and listing.locate(".kit-x", "other") is None
    assert listing.find_record(".kit-x", near="~") == {"b1": "nonce-1"}
    steering = vendor_world.from_provider(_Provider(lambda: _Steering()))  # a method returning the object
    assert steering is not None and steering.capabilities == {"world", "world-states"}
    assert steering.pause("b1") == "paused b1"
    with pytest.raises(pytest.skip.Exception, match=r"^unverified .*conformance_world has no fail\(\)"):
        steering.fail("b1")
    assert vendor_world.from_provider(_Provider(object())) is None  # neither sandboxes() nor read_file()


@pytest.mark.suite
def test_a_plugin_offering_its_world_reaches_the_full_profile_without_a_fake(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [*CLI, "certify", "--backend", str(PLUGIN), "--progress", "off", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    report = json.loads((out / "report.json").read_text())
    assert done.returncode == 0 and report["certified"], done.stdout[-3000:] + done.stderr[-2000:]
    assert report["fake"] is None and report["profile"] == "full"
    assert "world-states" in report["backend"]["capabilities"]

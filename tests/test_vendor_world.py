"""A plugin's own view of its sandboxes (conformance_world) stands in for a fake's world in a live run."""

from __future__ import annotations

import pytest

from conformance import vendor_world
from tests.conftest import ROOT, certify

PLUGIN = ROOT / "fakes" / "plugins" / "world_hook_box"


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
    run = certify("--backend", PLUGIN, out=tmp_path / "out", cwd=tmp_path)
    assert run.done.returncode == 0 and run.report and run.report["certified"], run.output()
    assert run.report["fake"] is None and run.report["profile"] == "full"
    assert "world-states" in run.report["backend"]["capabilities"]

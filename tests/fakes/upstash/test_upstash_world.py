"""The conformance kit's handle on the Upstash fake: services.start("upstash") and its world."""

from __future__ import annotations

import os

import httpx
import pytest
from upstash_box import Box, BoxError

from fakes import services

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def service(tmp_path):
    fake = services.start("upstash", tmp_path)
    try:
        yield fake
    finally:
        fake.stop()


def _kw(service: services.FakeService) -> dict[str, str]:
    return {"api_key": service.env["UPSTASH_BOX_API_KEY"], "base_url": service.env["UPSTASH_BOX_BASE_URL"]}


def test_service_entry(service, tmp_path):
    assert service.name == "upstash"
    assert set(service.env) == {"UPSTASH_BOX_BASE_URL", "UPSTASH_BOX_API_KEY", "UPSTASH_DISABLE_TELEMETRY"}
    assert service.env["UPSTASH_BOX_BASE_URL"].startswith("http://127.0.0.1:")
    assert service.secret_vars == {"UPSTASH_BOX_API_KEY"} and service.credential_var == "UPSTASH_BOX_API_KEY"
    isolation = {"isolation"} if service.world.world.isolated else set()
    assert service.world.capabilities == {"world", "world-states", "transport-faults"} | isolation
    box = Box.create(**_kw(service))
    assert (tmp_path / "boxes" / box.id / "home").is_dir(), "boxes live under the run's workdir"
    service.stop()
    assert not (tmp_path / "boxes").exists()
    with pytest.raises(httpx.ConnectError):  # Box.list does not wrap transport errors
        Box.list(**_kw(service))


def test_world_locates_and_disturbs_boxes(service):
    world = service.world
    box = Box.create(**_kw(service))
    other = Box.create(**_kw(service))
    assert world.sandboxes() == {box.id: "idle", other.id: "idle"}
    handle = box.exec.session(cmd='printf nonce-123 > "$HOME"/.kit-nonce')
    assert handle.wait(5) == 0
    assert world.locate(".kit-nonce", "nonce-123") == box.id
    assert world.locate(".kit-nonce", "other") is None
    world.pause(box.id)
    assert world.sandboxes()[box.id] == "paused"
    with pytest.raises(BoxError, match="paused"):
        box.exec.session(cmd="true")
    box.resume()
    world.fail(box.id)
    assert world.sandboxes()[box.id] == "error"
    with pytest.raises(BoxError, match="error state"):
        box.exec.session(cmd="true")
    world.delete(other.id)
    assert other.id not in world.sandboxes()
    with pytest.raises(BoxError) as info:
        Box.get(other.id, **_kw(service))
    assert info.value.status_code == 404


def test_authenticated_with_and_the_decoy_key(service, monkeypatch):
    key = service.env["UPSTASH_BOX_API_KEY"]
    box = Box.create(**_kw(service))
    assert service.world.authenticated_with(box.id, key)
    assert not service.world.authenticated_with(box.id, "kit-decoy-0123")
    monkeypatch.setenv("UPSTASH_BOX_API_KEY", "kit-decoy-0123")  # what env.secret-scope puts in os.environ
    monkeypatch.setenv("UPSTASH_BOX_BASE_URL", service.env["UPSTASH_BOX_BASE_URL"])
    with pytest.raises(BoxError) as info:
        Box.create()  # a backend that reads os.environ instead of the secret scope gets nowhere
    assert info.value.status_code == 401
    assert len(service.world.sandboxes()) == 1
    assert os.environ["UPSTASH_BOX_API_KEY"] == "kit-decoy-0123"

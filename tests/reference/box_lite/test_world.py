"""The kit's world view of Box Lite boxes (fakes/box_lite): what it reads from the box manager's files
is what the box manager says, its disturbances do what the kit's checks rely on, and the fake's stop
leaves no process and no file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes.services import start
from tests.box_lite.conftest import _alive as alive
from tests.box_lite.conftest import box_processes, mentioning


@pytest.fixture
def fake(tmp_path: Path):
    service = start("box_lite", tmp_path / "fake")
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def manager(fake):
    from reference.box_lite.boxes import BoxManager
    from reference.box_lite.paths import BoxHome

    return BoxManager(BoxHome.at(fake.env["HERMES_BOX_HOME"]))


def test_the_fake_exports_its_home_and_claims_the_full_profiles_world(fake):
    home = Path(fake.env["HERMES_BOX_HOME"])
    assert home.is_dir() and fake.secret_vars == frozenset() and fake.credential_var is None
    assert {"world", "world-states", "isolation"} <= fake.world.capabilities
    assert "transport-faults" not in fake.world.capabilities  # no service, no transport to script
    assert fake.world.sandboxes() == {}


def test_states_are_the_box_managers_in_the_kits_words(fake, manager):
    world = fake.world
    for name in ("up", "down", "bad"):
        manager.create(name)
    manager.stop("down")
    world.fail("bad")
    said = {name: manager.state(name) for name in ("up", "down", "bad")}
    assert said == {"up": "running", "down": "stopped", "bad": "broken"}
    assert world.sandboxes() == {"up": "running", "down": "paused", "bad": "error"}
    manager.remove("bad")
    assert world.sandboxes() == {"up": "running", "down": "paused"}


def test_disturbances_act_as_a_user_would(fake, manager):
    world = fake.world
    manager.create("alpha")
    assert manager.exec("alpha", ["sh", "-c", "printf nonce-1 > ~/.kit-mark"]) == 0
    assert world.locate(".kit-mark", "nonce-1") == "alpha"
    assert world.locate(".kit-mark", "other") is None

    world.pause("alpha")
    assert manager.state("alpha") == "stopped" and world.sandboxes()["alpha"] == "paused"
    manager.start("alpha")
    world.fail("alpha")
    assert manager.state("alpha") == "broken" and manager.daemon_pid("alpha") is None
    world.delete("alpha")
    assert manager.state("alpha") is None and world.sandboxes() == {}
    assert world.credentials("alpha") == () and not world.authenticated_with("alpha", "anything")


def test_a_failing_disturbance_says_what_hermes_box_said(fake):
    with pytest.raises(RuntimeError, match="hermes-box stop nope exited 2"):
        fake.world.pause("nope")
    with pytest.raises(RuntimeError, match="no running daemon"):
        fake.world.fail("nope")


def test_stop_ends_every_daemon_and_removes_the_home(tmp_path):
    from reference.box_lite.boxes import BoxManager
    from reference.box_lite.paths import BoxHome

    service = start("box_lite", tmp_path / "fake")
    home = Path(service.env["HERMES_BOX_HOME"])
    manager = BoxManager(BoxHome.at(home))
    manager.create("one")
    manager.create("two")
    command = manager.popen("two", ["sleep", "300"])
    running = box_processes(home)
    assert len(running) == 4, running  # two daemons, two box inits
    service.stop()
    assert command.wait(15) is not None
    assert not home.exists()
    assert [pid for pid in running.values() if alive(pid)] == []
    assert mentioning(home) == {}

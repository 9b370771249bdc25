"""box_lite as Hermes drives it: which box a task gets, what cleanup does to it, and what happens when a
box is stopped, removed or broken behind the backend's back.  Real boxes (namespaces, daemons) in a temp
home; disturbances through the ``hermes-box`` command in another process, or a killed daemon."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from reference.common.errors import SettingsError
from reference.common.plugin import PROBE_TASK_ID


def out(result: dict) -> str:
    return str(result["output"]).strip()


def box_dirs(home: Path) -> list[str]:
    boxes = home / "data" / "boxes"
    return sorted(p.name for p in boxes.iterdir()) if boxes.is_dir() else []


def kill_daemon(home: Path, name: str, manager) -> None:
    """Break the box: its daemon dies without a stop (the box's processes die with it)."""
    pid = manager.daemon_pid(name)
    assert pid is not None, f"box {name} has no daemon"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while manager.daemon_pid(name) is not None:
        assert time.monotonic() < deadline, "the killed daemon still holds its pid file"
        time.sleep(0.02)


def connection_error() -> type[Exception]:
    from tools.environments.base import EnvironmentConnectionError

    return EnvironmentConnectionError


# ------------------------------------------------------------------------------------ which box
def test_a_persistent_task_box_is_stopped_at_cleanup_and_reused_with_its_data(create, manager):
    first = create("profile:work:s1", persistent=True)
    name = first.box_name
    assert name.startswith("hermes-profile-work-s1-")
    assert first.execute("echo kept > /data/f && echo at-home > ~/g")["returncode"] == 0
    first.cleanup()
    assert manager.state(name) == "stopped"

    second = create("profile:work:s1", persistent=True)
    assert second.box_name == name
    assert out(second.execute("cat /data/f ~/g")).split() == ["kept", "at-home"]
    assert manager.state(name) == "running"
    assert [box.name for box in manager.boxes()] == [name]


def test_a_non_persistent_box_is_the_environments_own_and_removed_at_cleanup(create, manager, box_home):
    one, other = create("same-task"), create("same-task")
    assert one.box_name != other.box_name, "two sessions of one task share a box"
    assert one.execute("echo mine > ~/f")["returncode"] == 0
    one.cleanup()
    assert manager.state(one.box_name) is None
    assert one.box_name not in box_dirs(box_home)
    assert out(other.execute("cat ~/f 2>/dev/null || echo fresh")) == "fresh"
    assert manager.state(other.box_name) == "running", "cleaning up one session touched another's box"


def test_force_remove_removes_a_persistent_task_box(create, manager):
    env = create("doomed", persistent=True)
    name = env.box_name
    assert env.execute("touch /data/f")["returncode"] == 0
    env.cleanup(force_remove=True)
    assert manager.state(name) is None
    again = create("doomed", persistent=True)
    assert again.box_name == name and out(again.execute("test -e /data/f && echo kept || echo fresh")) == "fresh"


def test_the_prompt_probe_gets_a_box_of_its_own_removed_after(provider, manager):
    env = provider.create_environment(
        cwd="", timeout=10, task_id=PROBE_TASK_ID, container_config={"container_persistent": True}
    )
    assert out(env.execute("uname -s")) == "Linux"
    env.cleanup(force_remove=True)  # what Hermes's prompt builder does after the probe
    assert manager.boxes() == []


def test_a_configured_box_is_used_as_is_by_every_task_and_never_stopped_or_removed(create, manager, monkeypatch):
    manager.create("mine")
    assert manager.exec("mine", ["sh", "-c", "echo precious > /data/p"]) == 0
    monkeypatch.setenv("HERMES_BOX_NAME", "mine")
    one, two = create("one"), create("two", persistent=True)
    assert one.box_name == two.box_name == "mine"
    assert out(two.execute("cat /data/p")) == "precious"
    one.cleanup(force_remove=True)
    two.cleanup()
    assert manager.state("mine") == "running"
    assert [box.name for box in manager.boxes()] == ["mine"]
    assert manager.exec("mine", ["test", "-f", "/data/p"]) == 0


def test_a_configured_box_that_does_not_exist_yet_is_created(create, manager, monkeypatch):
    monkeypatch.setenv("HERMES_BOX_NAME", "fresh-box")
    env = create("t")
    assert env.box_name == "fresh-box" and manager.state("fresh-box") == "running"
    env.cleanup(force_remove=True)
    assert manager.state("fresh-box") == "running", "Hermes removed the user's configured box"


# --------------------------------------------------------------------- behind the backend's back
def test_a_box_stopped_behind_the_backends_back_is_started_again_with_its_data(create, manager, hermes_box):
    env = create("paused", persistent=True)
    assert env.execute("echo before > /data/x")["returncode"] == 0
    hermes_box("stop", env.box_name)
    assert manager.state(env.box_name) == "stopped"
    result = env.execute("cat /data/x")
    assert result["returncode"] == 0 and out(result) == "before", result
    assert "environment_recreated" not in result, "a restarted box is the same box"
    assert manager.state(env.box_name) == "running"


def test_a_broken_box_is_reported_and_left_alone(create, manager, box_home):
    env = create("breaks", persistent=True)
    name = env.box_name
    assert env.execute("echo safe > /data/s")["returncode"] == 0
    kill_daemon(box_home, name, manager)
    assert manager.state(name) == "broken"

    result = env.execute("echo should-not-run")
    assert result["returncode"] != 0 and "should-not-run" not in out(result)
    assert "broken" in out(result) and "error state" in out(result), result
    assert f"hermes-box doctor {name}" in out(result)
    assert manager.state(name) == "broken", "the backend started (or removed) a broken box"

    env.cleanup()
    assert manager.state(name) == "broken"
    with pytest.raises(connection_error()) as raised:
        create("breaks", persistent=True)
    assert name in str(raised.value) and "broken" in str(raised.value)
    assert manager.state(name) == "broken" and box_dirs(box_home) == [name]
    manager.start(name)  # what the user does after hermes-box doctor: the data is still there
    assert manager.exec(name, ["test", "-f", "/data/s"]) == 0


def test_a_removed_box_is_reported_once_then_the_next_command_runs_in_a_new_one(create, manager, hermes_box):
    env = create("removed")
    old = env.box_name
    assert env.execute("touch ~/old")["returncode"] == 0
    hermes_box("rm", old, "--force")
    first = env.execute("echo one")
    assert first["returncode"] != 0 and "no longer exists" in out(first) and "one" not in out(first).split()
    second = env.execute("test -e ~/old && echo old || echo fresh")
    assert second["returncode"] == 0 and out(second) == "fresh"
    assert second.get("environment_recreated") is True
    assert env.box_name != old and manager.state(env.box_name) == "running" and manager.state(old) is None


# ------------------------------------------------------------------------------------- settings
def test_where_boxes_live_comes_from_the_variable_then_the_config_key(provider, terminal, monkeypatch, tmp_path):
    monkeypatch.setenv("HERMES_BOX_HOME", "relative/boxes")
    with pytest.raises(SettingsError) as raised:
        provider.configure()
    assert raised.value.setting == "HERMES_BOX_HOME" and "absolute" in str(raised.value)

    monkeypatch.delenv("HERMES_BOX_HOME")
    terminal(box_lite_home="also/relative")
    with pytest.raises(SettingsError) as raised:
        provider.configure()
    assert raised.value.setting == "terminal.box_lite_home"

    terminal(box_lite_home=str(tmp_path / "elsewhere"), box_lite_box="shared")
    status, detail = provider.probe()
    assert status == "ready" and str(tmp_path / "elsewhere") in detail and "box shared for every task" in detail


def test_doctor_names_a_broken_configured_box(provider, manager, box_home, monkeypatch):
    manager.create("mine")
    monkeypatch.setenv("HERMES_BOX_NAME", "mine")
    assert (True, "box mine", "(running)") in provider.doctor_checks()
    kill_daemon(box_home, "mine", manager)
    failing = [row for row in provider.doctor_checks() if not row[0]]
    assert failing == [(False, "box mine", "(broken: run `hermes-box doctor mine`)")]


def test_the_archive_passphrase_never_reaches_a_box(create, provider, terminal, monkeypatch):
    monkeypatch.setenv("BOX_PASSPHRASE", "kit-passphrase-5f1e")
    terminal(env_passthrough=["BOX_PASSPHRASE"])  # even when a user asks for it to be forwarded
    assert "BOX_PASSPHRASE" in provider.strip_env_keys
    text = out(create("secret").execute("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"))
    assert "kit-passphrase-5f1e" not in text and "BOX_PASSPHRASE" not in text


def test_a_box_locked_by_another_command_is_asked_again_then_named(create, manager, box_home, monkeypatch):
    import subprocess
    import sys

    from reference.common import retry

    env = create("locked", persistent=True)
    name = env.box_name
    env.cleanup()  # stopped: the next environment must start it, which takes the lock
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from reference.box_lite.locks import BoxLock\n"
            "from reference.box_lite.paths import BoxHome\n"
            f"with BoxLock(BoxHome.at({str(box_home)!r}), {name!r}, 'save'):\n"
            "    print('held', flush=True)\n"
            "    sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(retry, "BACKOFF_S", 0.001)  # the number of attempts is the point, not the pauses
        with pytest.raises(connection_error()) as raised:
            create("locked", persistent=True)
        assert f"PID {holder.pid}" in str(raised.value) and "save" in str(raised.value)
        assert manager.state(name) == "stopped"
    finally:
        holder.communicate("", timeout=30)
    assert out(create("locked", persistent=True).execute("echo started")) == "started"

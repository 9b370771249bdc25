"""upstash_box against the Upstash fake: every behaviour of the hermes-box README.

Each test drives the real backend (real SDK, real WebSocket sessions, real
bash in the box world) and scripts the matching fault through the fake.
"""

from __future__ import annotations

import logging
import os
import tarfile
from pathlib import Path

import pytest
import yaml

from fakes.faults import Fault
from fakes.upstash import Settings, UpstashServer
from fakes.world import DELETED, ERROR, PAUSED

pytestmark = pytest.mark.usefixtures("builtin_host")


@pytest.fixture(scope="module")
def server():
    with UpstashServer() as srv:
        yield srv


@pytest.fixture
def home(tmp_path, monkeypatch, server):
    """A HERMES_HOME with a skill, a cache file and a credential file, pointed at the fake."""
    root = tmp_path / "hermes"
    (root / "skills" / "demo").mkdir(parents=True)
    (root / "skills" / "demo" / "SKILL.md").write_text("# demo skill\n")
    (root / "cache" / "images").mkdir(parents=True)
    (root / "cache" / "images" / "a.bin").write_bytes(b"\x00\x01cache")
    (root / "credentials").mkdir()
    (root / "credentials" / "svc.json").write_text('{"k": 1}\n')
    write_config(root, {})
    monkeypatch.setenv("HERMES_HOME", str(root))
    monkeypatch.setenv("UPSTASH_BOX_API_KEY", server.api_key)
    monkeypatch.setenv("UPSTASH_BOX_BASE_URL", server.base_url)
    monkeypatch.setenv("HERMES_FORCE_FILE_SYNC", "1")
    return root


def write_config(root: Path, terminal: dict) -> None:
    settings = {"credential_files": ["credentials/svc.json"], **terminal}
    (root / "config.yaml").write_text(yaml.safe_dump({"terminal": settings}))


@pytest.fixture
def provider():
    from reference.upstash_box.provider import UpstashBoxProvider

    return UpstashBoxProvider()


def make(provider, task_id: str, *, persistent: bool = True, **kwargs):
    return provider.create_environment(
        cwd="~", timeout=30, task_id=task_id, container_config={"container_persistent": persistent}, **kwargs
    )


def box_of(server, env):
    return server.world.get(env.box_id, include_deleted=True)


def test_persistent_box_is_named_after_the_task_paused_on_exit_and_resumed(home, provider, server):
    env = make(provider, "session:persist-1")
    box = box_of(server, env)
    assert box.name.startswith("hermes-session-persist-1-") and "hermes" in box.labels
    env.execute("echo kept > ~/state.txt")
    env.cleanup()
    assert box.state == PAUSED
    again = make(provider, "session:persist-1")
    assert again.box_id == env.box_id, "the persistent Box was not found by name"
    assert again.execute("cat ~/state.txt")["output"].strip() == "kept"
    again.cleanup()


def test_keep_alive_box_is_left_running(home, provider, server):
    write_config(home, {"upstash_box_keep_alive": True})
    env = make(provider, "session:keepalive")
    env.cleanup()
    box = box_of(server, env)
    assert box.state not in (PAUSED, DELETED) and box.meta.get("keep_alive") is True


def test_size_runtime_and_labels_reach_the_service(home, provider, server):
    write_config(
        home,
        {
            "upstash_box_size": "huge",
            "upstash_box_labels": "laptop,ci",
            "upstash_box_runtime": "python",
            "upstash_box_name_prefix": "mybox",
        },
    )
    env = make(provider, "session:labels", persistent=False)
    box = box_of(server, env)
    assert box.labels == ["hermes", "laptop", "ci"]
    assert box.meta.get("size") == "small" and box.meta.get("runtime") == "python"
    assert box.name.startswith("mybox-session-labels-")
    env.cleanup()


def test_session_box_is_unique_and_only_it_is_deleted(home, provider, server):
    first = make(provider, "session:own", persistent=False)
    second = make(provider, "session:own", persistent=False)
    assert first.box_id != second.box_id
    first.cleanup()
    assert box_of(server, first).state == DELETED
    assert box_of(server, second).state != DELETED
    assert second.execute("echo alive")["output"].strip() == "alive"
    second.cleanup()


def test_delete_retries_a_temporary_failure(home, provider, server):
    env = make(provider, "session:retry", persistent=False)
    server.faults.arm(Fault("status", route="DELETE /v2/box/{id}", box=env.box_id, times=2, status=503))
    env.cleanup()
    assert box_of(server, env).state == DELETED


def test_delete_failure_keeps_the_box_for_a_later_cleanup(home, provider, server, caplog):
    env = make(provider, "session:keep", persistent=False)
    server.faults.arm(Fault("status", route="DELETE /v2/box/{id}", box=env.box_id, times=-1, status=503))
    with caplog.at_level(logging.WARNING):
        env.cleanup()
    assert box_of(server, env).state != DELETED and "kept so a later cleanup can retry" in caplog.text
    server.faults.clear()
    env.cleanup()
    assert box_of(server, env).state == DELETED


def test_a_box_already_gone_counts_as_deleted(home, provider, server):
    env = make(provider, "session:gone", persistent=False)
    server.world.delete(box_of(server, env))
    env.cleanup()  # no exception


def test_paused_behind_the_back_is_resumed_once(home, provider, server):
    env = make(provider, "session:paused")
    server.world.pause(box_of(server, env))
    result = env.execute("echo resumed")
    assert result["returncode"] == 0 and result["output"].strip() == "resumed"
    assert box_of(server, env).state != PAUSED
    env.cleanup()


def test_deleted_behind_the_back_is_reported_then_replaced(home, provider, server):
    env = make(provider, "session:deleted", persistent=False)
    old = env.box_id
    server.world.delete(box_of(server, env))
    first = env.execute("touch ~/ran")
    assert first["returncode"] != 0 and "no longer exists" in first["output"] and "did not run" in first["output"]
    second = env.execute("echo fresh; ls ~/ran 2>&1")
    assert env.box_id != old and second["output"].startswith("fresh")
    assert "No such file" in second["output"], "the refused command ran after all"
    assert second.get("environment_recreated") is True
    assert not env.execute("true").get("environment_recreated")
    env.cleanup()


def test_error_state_is_reported_not_replaced(home, provider, server):
    env = make(provider, "session:broken", persistent=False)
    boxes_before = {b.id for b in server.world.boxes()}
    server.world.set_state(box_of(server, env), ERROR)
    for _ in range(2):
        result = env.execute("echo no")
        assert result["returncode"] != 0 and "error state" in result["output"]
    assert {b.id for b in server.world.boxes()} == boxes_before
    assert box_of(server, env).state == ERROR


def test_a_persistent_box_in_the_error_state_is_not_replaced_at_creation(home, provider, server):
    env = make(provider, "session:err-persist")
    env.cleanup()
    server.world.set_state(box_of(server, env), ERROR)
    with pytest.raises(Exception, match="error state"):
        make(provider, "session:err-persist")
    assert sum(1 for b in server.world.boxes() if b.name == box_of(server, env).name) == 1


def test_create_race_attaches_the_box_the_other_process_made(home, provider, server):
    first = make(provider, "session:race")
    first_id = first.box_id
    first.cleanup()
    # The lookup misses (the other process had not created it yet); the create then collides.
    server.faults.arm(Fault("status", route="GET /v2/box/{id}", times=1, status=404, message="not found"))
    second = make(provider, "session:race")
    assert second.box_id == first_id
    second.cleanup()


def test_quota_error_is_clear(tmp_path, monkeypatch, home, provider):
    with UpstashServer(settings=Settings(quota=1)) as small:
        monkeypatch.setenv("UPSTASH_BOX_API_KEY", small.api_key)
        monkeypatch.setenv("UPSTASH_BOX_BASE_URL", small.base_url)
        env = make(provider, "session:q1")
        with pytest.raises(Exception, match="box list --label hermes") as err:
            make(provider, "session:q2")
        assert small.api_key not in str(err.value)
        env.cleanup()


def test_files_go_up_as_an_archive_and_changes_come_back(home, provider, server):
    env = make(provider, "session:sync", persistent=False)
    listing = env.execute("cd ~/.hermes && find . -type f | sort")["output"].split()
    assert listing == ["./cache/images/a.bin", "./credentials/svc.json", "./skills/demo/SKILL.md"]
    env.execute(
        "printf new > ~/.hermes/cache/images/a.bin; printf evil > ~/.hermes/credentials/svc.json; "
        "printf x > ~/.hermes/config.yaml"
    )
    env.cleanup()
    assert (home / "cache" / "images" / "a.bin").read_bytes() == b"new"
    assert (home / "credentials" / "svc.json").read_text() == '{"k": 1}\n'
    assert "credential_files" in (home / "config.yaml").read_text()


def test_the_key_never_reaches_the_box_or_the_logs(home, provider, server, caplog):
    with caplog.at_level(logging.DEBUG):
        env = make(provider, "session:secret", persistent=False)
        dump = env.execute("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")["output"]
        server.world.delete(box_of(server, env))
        refusal = env.execute("true")["output"]
        env.cleanup()
    assert "UPSTASH_BOX_API_KEY" not in dump and server.api_key not in dump
    assert server.api_key not in refusal and server.api_key not in caplog.text


def test_telemetry_is_switched_off_before_any_client(monkeypatch):
    from reference.upstash_box.provider import UpstashBoxProvider

    monkeypatch.delenv("UPSTASH_DISABLE_TELEMETRY", raising=False)
    UpstashBoxProvider()
    assert os.environ["UPSTASH_DISABLE_TELEMETRY"] == "1"


def test_prompt_probe_gets_no_box(home, provider, server):
    before = len(server.world.boxes())
    env = provider.create_environment(cwd="~", timeout=4, task_id="prompt-backend-probe", container_config={})
    assert env.execute("uname -s")["returncode"] != 0
    env.cleanup()
    assert len(server.world.boxes()) == before


def test_sync_back_tar_uses_absolute_member_names(home, provider, server, tmp_path):
    env = make(provider, "session:tar", persistent=False)
    dest = tmp_path / "back.tar"
    env._download_archive(dest)
    with tarfile.open(dest) as tar:
        names = tar.getnames()
    home_dir = env._home.lstrip("/")
    assert f"{home_dir}/.hermes/skills/demo/SKILL.md" in names
    env.cleanup()


@pytest.mark.parametrize("exit_code, reported", [(0, False), (-1, True)])
def test_a_stdin_send_that_fails_as_the_command_ends_is_judged_by_the_exit(exit_code, reported):
    # The soak saw it: the command ended, the server closed the session, and the last stdin
    # frame's send failed before the exit reached the handle.  Only a lost session is a failure.
    import threading

    from reference.common.stream_handle import StreamProcessHandle
    from reference.upstash_box import session

    class ClosedSession:
        def write(self, data):
            pass

        def end_stdin(self):
            threading.Timer(0.1, handle.finish, args=(exit_code,)).start()  # the exit arrives just after
            raise ConnectionError("received 1000 (OK); then sent 1000 (OK)")

    handle = StreamProcessHandle()
    session._feed_stdin(ClosedSession(), b"nonce", handle)
    assert bool(handle._hermes_stdin_errors) is reported

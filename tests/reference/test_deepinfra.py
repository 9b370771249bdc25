"""deepinfra against the DeepInfra fake: every behaviour of the deepinfra-hermes-sandbox README.

Each test drives the real backend (the real deepinfra SDK, real NDJSON exec
streams, real bash in the box world) and scripts what it needs through the fake.
"""

from __future__ import annotations

import logging
import os
import tarfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from fakes.deepinfra import DeepInfraServer, Settings
from fakes.deepinfra.settings import ROUTE_CREATE
from fakes.faults import Fault

pytestmark = pytest.mark.usefixtures("builtin_host")
INSTANT = Settings(create_delay_s=0, boot_delay_s=0, stop_delay_s=0, max_active=100)


@pytest.fixture(scope="module")
def server():
    with DeepInfraServer(settings=INSTANT) as srv:
        yield srv


def point_at(monkeypatch, srv: DeepInfraServer) -> None:
    monkeypatch.setenv("DEEPINFRA_API_KEY", srv.api_key)
    monkeypatch.setenv("DEEPINFRA_SANDBOX_BASE_URL", srv.base_url)


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
    (root / "config.yaml").write_text(yaml.safe_dump({"terminal": {"credential_files": ["credentials/svc.json"]}}))
    monkeypatch.setenv("HERMES_HOME", str(root))
    monkeypatch.delenv("DEEPINFRA_SANDBOX_PLAN", raising=False)
    monkeypatch.setenv("HERMES_FORCE_FILE_SYNC", "1")
    point_at(monkeypatch, server)
    yield root
    server.faults.clear()


@pytest.fixture
def provider():
    from reference.deepinfra.provider import DeepInfraProvider

    return DeepInfraProvider()


def make(provider, task_id: str, *, persistent: bool = True, **container):
    return provider.create_environment(
        cwd="/root", timeout=30, task_id=task_id, container_config={"container_persistent": persistent, **container}
    )


def box_of(srv: DeepInfraServer, env):
    return srv.world.get(env.sandbox_id, include_deleted=True)


def alive(env, pid: str) -> bool:
    state = env.execute(f"sed 's/^.*) //' /proc/{pid}/stat 2>/dev/null | cut -c1")["output"].strip()
    return state not in ("", "Z")


# ------------------------------------------------------------------ settings
def test_the_endpoint_is_the_backends_own_variable_never_hermess_inference_one(home, provider, server, monkeypatch):
    """DEEPINFRA_BASE_URL is also where Hermes's DeepInfra inference provider (and the SDK, by default)
    sends requests: the backend reads DEEPINFRA_SANDBOX_BASE_URL, and gives the SDK its endpoint always."""
    from deepinfra.clients.deepinfra import DEFAULT_BASE_URL

    from reference.deepinfra.sandboxes import shared_client

    monkeypatch.setenv("DEEPINFRA_BASE_URL", "http://127.0.0.1:9")  # an inference proxy: nothing answers
    env = make(provider, "own-endpoint", persistent=False)
    try:
        result = env.execute("echo sandbox")
        assert result["returncode"] == 0 and result["output"].strip() == "sandbox"
    finally:
        env.cleanup()
    client = shared_client("kit-unused-key", None)
    assert DEFAULT_BASE_URL in str(vars(client)) and "127.0.0.1:9" not in str(vars(client))


# ------------------------------------------------------------------ persistence
def test_idle_reaper_stops_and_the_next_environment_resumes_with_workspace_intact(home, provider, server):
    env = make(provider, "session:reap")
    assert env.execute("echo $HOME; pwd")["output"].split() == ["/workspace", "/workspace"]
    env.execute("echo kept > ~/state.txt; echo lost > /tmp/lost.txt")
    env.cleanup()  # what the idle reaper calls
    assert box_of(server, env).state == "stopped", "the reaper must stop, not terminate"
    again = make(provider, "session:reap")
    assert again.sandbox_id == env.sandbox_id, "the stopped sandbox was not resumed"
    out = again.execute("cat ~/state.txt; ls /tmp/lost.txt 2>&1")["output"]
    assert out.startswith("kept\n") and "No such file" in out, "only /workspace survives a stop"
    again.wait_for_cleanup(5)  # the host's exit path: the session ends
    assert box_of(server, env).state == "deleted", "the sandbox must be terminated at session end"


def test_stopped_behind_the_back_is_resumed_by_the_next_command_keeping_exports(home, provider, server):
    env = make(provider, "session:behind")
    env.execute("export KEEP=yes; echo f > ~/f")
    server.service.stop(box_of(server, env), immediate=True)
    result = env.execute("echo $KEEP; cat ~/f")
    assert result["returncode"] == 0 and result["output"].split() == ["yes", "f"]
    assert box_of(server, env).state == "running"
    env.cleanup(force_remove=True)


def test_a_persistent_environment_reused_after_cleanup_resumes(home, provider, server):
    env = make(provider, "session:reuse")
    env.cleanup()
    assert env.execute("echo back")["output"].strip() == "back"
    env.cleanup(force_remove=True)
    assert box_of(server, env).state == "deleted"


def test_reattach_only_when_exactly_one_tagged_sandbox_exists(home, provider, server):
    first, second = make(provider, "session:twins"), make(provider, "session:twins")
    assert first.sandbox_id != second.sandbox_id
    first.cleanup()
    second.cleanup()
    third = make(provider, "session:twins")
    assert third.sandbox_id not in (first.sandbox_id, second.sandbox_id), "two matches: nothing may be guessed"
    assert {box_of(server, e).state for e in (first, second)} == {"stopped"}, "the ambiguous ones were touched"
    # A running match is in use by someone else: never attached either.
    fourth = make(provider, "session:twins")
    assert fourth.sandbox_id != third.sandbox_id
    for e in (first, second, third, fourth):
        e.cleanup(force_remove=True)


def test_no_reattach_across_sessions(home, provider, server, monkeypatch):
    env = make(provider, "session:other-process")
    env.cleanup()
    monkeypatch.setattr("reference.deepinfra.sandboxes.SESSION_ID", "another-hermes-process")
    fresh = make(provider, "session:other-process")
    assert fresh.sandbox_id != env.sandbox_id, "a new session must start fresh"
    fresh.cleanup(force_remove=True)
    env.cleanup(force_remove=True)


def test_non_persistent_is_terminated_on_cleanup(home, provider, server):
    env = make(provider, "session:eph", persistent=False)
    assert env._session_scoped and not env._persistent
    env.cleanup()
    assert box_of(server, env).state == "deleted"


def test_session_end_terminates_every_sandbox_of_the_process(home, provider, server):
    from reference.deepinfra import sandboxes

    env = make(provider, "session:exit")
    env.cleanup()  # stopped, and no environment holds it any more
    assert env.sandbox_id in sandboxes.owned()
    sandboxes.terminate_owned(budget_s=5)
    assert box_of(server, env).state == "deleted" and env.sandbox_id not in sandboxes.owned()


def test_states_are_waited_for(home, provider, server):
    slow = Settings(create_delay_s=0.2, boot_delay_s=0.2, stop_delay_s=0.2)
    saved = {k: getattr(server.settings, k) for k in ("create_delay_s", "boot_delay_s", "stop_delay_s")}
    try:
        for k in saved:
            setattr(server.settings, k, getattr(slow, k))
        env = make(provider, "session:slow")
        server.service.stop(box_of(server, env))  # stopping: the next command waits, then starts it
        assert env.execute("echo ok")["output"].strip() == "ok"
        env.cleanup(force_remove=True)
    finally:
        for k, v in saved.items():
            setattr(server.settings, k, v)


# ------------------------------------------------------------------ failures and leaks
def test_deleted_behind_the_back_is_replaced_and_flagged_once(home, provider, server):
    env = make(provider, "session:gone", persistent=False)
    old = env.sandbox_id
    env.execute("touch ~/old")
    server.service.terminate(box_of(server, env))
    first = env.execute("ls ~/old 2>&1; echo ran")
    assert env.sandbox_id != old and first["output"].rstrip().endswith("ran") and "No such file" in first["output"]
    assert first.get("environment_recreated") is True
    assert not env.execute("true").get("environment_recreated")
    env.cleanup()


def test_failed_sandbox_is_reported_not_replaced(home, provider, server):
    env = make(provider, "session:broken", persistent=False)
    before = {b.id for b in server.world.boxes()}
    server.service.fail(box_of(server, env))
    result = env.execute("echo no")
    assert result["returncode"] != 0 and "failed state" in result["output"] and "error" in result["output"]
    assert {b.id for b in server.world.boxes()} == before


def test_a_create_whose_reply_is_lost_is_cleaned_up_by_its_creation_tag(home, provider, server):
    server.faults.arm(Fault("drop", route=ROUTE_CREATE, after_bytes=3))
    env = make(provider, "session:leak", persistent=False)  # the retry after cleanup succeeds
    tagged = [
        b for b in server.world.boxes(include_deleted=True) if b.meta["tags"].get("hermes_task_id") == "session:leak"
    ]
    assert len(tagged) == 2
    leaked = next(b for b in tagged if b.id != env.sandbox_id)
    assert leaked.state == "deleted", "the sandbox whose create reply was lost was not terminated"
    env.cleanup()


def test_a_create_that_boots_into_failed_is_terminated(home, provider, server):
    server.service.fail_next_creates(1)
    before = {b.id for b in server.world.boxes(include_deleted=True)}
    with pytest.raises(Exception, match="did not start") as err:
        make(provider, "session:boot-fail", persistent=False)
    made = [b for b in server.world.boxes(include_deleted=True) if b.id not in before]
    assert len(made) == 1 and made[0].state == "deleted"
    assert server.api_key not in str(err.value)


def test_the_cap_error_is_clear_and_actionable(home, provider, monkeypatch):
    with DeepInfraServer(settings=Settings(create_delay_s=0, boot_delay_s=0, stop_delay_s=0, max_active=2)) as small:
        point_at(monkeypatch, small)
        first, second = make(provider, "session:cap1"), make(provider, "session:cap2")
        second.cleanup()  # stopped sandboxes count
        with pytest.raises(Exception) as err:
            make(provider, "session:cap3")
        text = str(err.value)
        assert "maximum of 2 active sandboxes" in text and "stopped sandboxes count" in text
        assert first.sandbox_id in text and "session:cap2" in text and "terminate" in text.lower()
        assert small.api_key not in text
        first.cleanup(force_remove=True)
        second.cleanup(force_remove=True)


# ------------------------------------------------------------------ plan
def test_plan_is_an_explicit_opt_in(home, provider, server, monkeypatch):
    env = make(provider, "session:plan", persistent=False, container_cpu=8, container_memory=65536)
    assert box_of(server, env).meta["plan"] == "medium", "container_cpu/memory must never pick a plan"
    env.cleanup()
    monkeypatch.setenv("DEEPINFRA_SANDBOX_PLAN", "large")
    env = make(provider, "session:plan", persistent=False)
    assert box_of(server, env).meta["plan"] == "large"
    env.cleanup()
    monkeypatch.setenv("DEEPINFRA_SANDBOX_PLAN", "gigantic")
    with pytest.raises(Exception, match=r"DEEPINFRA_SANDBOX_PLAN='gigantic'.*small, medium, large"):
        make(provider, "session:plan", persistent=False)


# ------------------------------------------------------------------ commands
def test_a_timeout_kills_only_the_command_and_a_background_job_survives(home, provider, server):
    env = make(provider, "session:kill", persistent=False)
    spawn = env.execute("nohup sleep 60 >/dev/null 2>&1 & echo $!", timeout=10)
    bg = spawn["output"].strip()
    started = time.monotonic()
    result = env.execute("echo $$ > ~/fg.pid; sleep 30", timeout=1)
    assert result["returncode"] == 124 and time.monotonic() - started < 4
    fg = env.execute("cat ~/fg.pid")["output"].strip()
    deadline = time.monotonic() + 3
    while alive(env, fg) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(env, fg), "the timed-out command is still running"
    assert alive(env, bg), "the kill reached a background job of another command"
    assert box_of(server, env).state == "running", "the sandbox was stopped instead of the command"
    env.cleanup()


def test_an_interrupt_kills_only_the_command(home, provider, server):
    from tools.interrupt import set_interrupt

    env = make(provider, "session:intr", persistent=False)
    holder: dict = {}

    def run() -> None:
        holder["result"] = env.execute("sleep 30")

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)
    set_interrupt(True, worker.ident)
    worker.join(10)
    set_interrupt(False, worker.ident)
    assert holder["result"]["returncode"] == 130
    assert env.execute("echo fine")["output"].strip() == "fine"
    assert box_of(server, env).state == "running"
    env.cleanup()


def test_when_the_kill_exec_fails_the_sandbox_is_stopped_and_resumed(home, provider, server, caplog, monkeypatch):
    env = make(provider, "session:fallback", persistent=False)
    env.execute("echo w > ~/kept")
    box = box_of(server, env)
    monkeypatch.setattr("reference.deepinfra.streaming.killer", lambda run_id, **kw: ["false"])
    with caplog.at_level(logging.WARNING):
        result = env.execute("sleep 30", timeout=1)
        assert result["returncode"] == 124
        deadline = time.monotonic() + 15
        while box.state == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
    assert box.state in ("stopping", "stopped") and "could not be killed on its own" in caplog.text
    assert env.execute("cat ~/kept")["output"].strip() == "w", "the next command must resume the sandbox"
    env.cleanup()


def test_the_30_minute_cap_is_reported_cleanly(home, provider, server, monkeypatch):
    monkeypatch.setattr("reference.deepinfra.streaming.MAX_COMMAND_S", 1)  # the service's cap, scaled down
    env = make(provider, "session:cap30", persistent=False)
    result = env.execute("echo started; sleep 30", timeout=20)
    assert result["returncode"] == 124
    assert "stops every command after 30 minutes" in result["output"] and result["output"].startswith("started")
    env.cleanup()


@pytest.mark.parametrize("size", [0, 1000, 200_000])
def test_binary_stdin_round_trips_exactly(home, provider, server, size):
    env = make(provider, f"session:stdin{size}", persistent=False)
    raw = bytes(range(256)) * (size // 256) + b"\x00\r\n\x1b end without newline"
    data = raw.decode("utf-8", "surrogateescape")  # how Hermes hands over bytes
    import hashlib

    result = env.execute("sha256sum", stdin_data=data)
    assert result["output"].split()[0] == hashlib.sha256(raw).hexdigest()
    echoed = env.execute("cat", stdin_data="quotes ' \" $HOME `x` \\ \r\nno newline")
    assert echoed["output"] == "quotes ' \" $HOME `x` \\ \r\nno newline"
    assert env.execute("cat; echo eof")["output"] == "eof\n", "no stdin must read as empty"
    leftovers = env.execute("ls -A /workspace/.hermes_sync /tmp | grep -c stdin || true")["output"].strip()
    assert leftovers == "0", "staged or decoded stdin files were left behind"
    env.cleanup()


def test_output_streams_while_the_command_runs(home, provider, server):
    env = make(provider, "session:stream", persistent=False)
    handle = env._run_bash("echo first; sleep 2; echo second", timeout=10)
    started = time.monotonic()
    first = handle.stdout.readline()
    assert first == "first\n" and time.monotonic() - started < 1.5, "output must arrive before the command ends"
    handle.wait(10)
    env.cleanup()


# ------------------------------------------------------------------ file sync
def test_files_go_up_as_one_archive_and_changes_come_back(home, provider, server):
    env = make(provider, "session:sync", persistent=False)
    listing = env.execute("cd /workspace/.hermes && find . -type f | sort")["output"].split()
    assert listing == ["./cache/images/a.bin", "./credentials/svc.json", "./skills/demo/SKILL.md"]
    env.execute(
        "printf new > ~/.hermes/cache/images/a.bin; printf evil > ~/.hermes/credentials/svc.json; "
        "printf x > ~/.hermes/config.yaml"
    )
    env.cleanup()
    assert (home / "cache" / "images" / "a.bin").read_bytes() == b"new"
    assert (home / "credentials" / "svc.json").read_text() == '{"k": 1}\n'
    assert "credential_files" in (home / "config.yaml").read_text()


def test_bulk_upload_is_one_exec_larger_archives_one_fs_write_and_huge_sets_go_file_by_file(
    home, provider, server, monkeypatch
):
    from reference.deepinfra import files

    env = make(provider, "session:bulk", persistent=False)
    calls: list[str] = []
    sandbox = env._sandbox
    real_write = sandbox.fs.write
    monkeypatch.setattr(sandbox.fs, "write", lambda path, data: (calls.append(path), real_write(path, data))[1])
    (home / "cache" / "images" / "b.bin").write_bytes(b"b")
    env.execute("true")
    assert calls == [], "a small archive travels in the unpacking exec's argv, with no file upload"
    assert env.execute("cat ~/.hermes/cache/images/b.bin")["output"] == "b"
    monkeypatch.setattr(files, "INLINE_MAX", 10)
    (home / "cache" / "images" / "c.bin").write_bytes(b"c")
    env.execute("true")
    assert len(calls) == 1 and calls[0].startswith("/workspace/.hermes_sync/up-"), calls
    calls.clear()
    monkeypatch.setattr(files, "BULK_MAX", 10)
    (home / "cache" / "images" / "d.bin").write_bytes(b"d")
    (home / "cache" / "images" / "e.bin").write_bytes(b"e")
    env.execute("true")
    assert sorted(calls) == ["/workspace/.hermes/cache/images/d.bin", "/workspace/.hermes/cache/images/e.bin"]
    assert env.execute("cat ~/.hermes/cache/images/e.bin")["output"] == "e"
    (home / "cache" / "images" / "b.bin").unlink()
    assert env.execute("ls ~/.hermes/cache/images")["output"].split() == ["a.bin", "c.bin", "d.bin", "e.bin"]
    assert env.execute("ls -A /workspace/.hermes_sync")["output"] == "", "transfer files were left behind"
    env.cleanup()


@pytest.mark.parametrize("way", ["inline", "file", "parts"])
def test_sync_back_archive_has_absolute_member_names_whichever_way_it_comes(
    home, provider, server, tmp_path, monkeypatch, way
):
    from reference.deepinfra import files

    env = make(provider, f"session:tar-{way}", persistent=False)
    if way != "inline":
        monkeypatch.setattr(files, "INLINE_BACK_MAX", 0)
    if way == "parts":
        monkeypatch.setattr(files, "PART_BYTES", 4096)
    reads: list[str] = []
    real_read = env._sandbox.fs.read
    monkeypatch.setattr(env._sandbox.fs, "read", lambda path: (reads.append(path), real_read(path))[1])
    env.execute("head -c 20000 /dev/urandom > ~/.hermes/cache/images/big.bin")
    dest = tmp_path / "back.tar"
    env._files.download(dest)
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        big = tar.extractfile("workspace/.hermes/cache/images/big.bin")
        assert big is not None and len(big.read()) == 20000
    assert "workspace/.hermes/skills/demo/SKILL.md" in names
    assert env.execute("ls -A /workspace/.hermes_sync")["output"] == "", "transfer files were left behind"
    parts = [r for r in reads if ".part." in r]
    assert {"inline": not reads, "file": len(reads) == 1 and not parts, "parts": parts == reads and len(parts) > 1}[
        way
    ], reads
    env.cleanup()


# ------------------------------------------------------------------ secrets and Hermes integration
def test_the_key_never_reaches_the_sandbox_or_the_logs(home, provider, server, caplog):
    with caplog.at_level(logging.DEBUG):
        env = make(provider, "session:secret", persistent=False)
        dump = env.execute("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")["output"]
        server.service.fail(box_of(server, env))
        refusal = env.execute("true")["output"]
        env.cleanup()
    assert "DEEPINFRA_API_KEY" not in dump and server.api_key not in dump
    assert server.api_key not in refusal and server.api_key not in caplog.text


def test_prompt_probe_gets_no_sandbox(home, provider, server):
    before = len(server.world.boxes())
    env = provider.create_environment(cwd="/root", timeout=4, task_id="prompt-backend-probe", container_config={})
    assert env.execute("uname -s")["returncode"] != 0
    env.cleanup()
    assert len(server.world.boxes()) == before


def test_provider_flags_doctor_and_registration(home, provider, monkeypatch):
    assert provider.name == "deepinfra" and provider.cache_path_base == "/workspace/.hermes"
    assert provider.strip_env_keys == frozenset({"DEEPINFRA_API_KEY"})
    assert "stdin-stream" not in provider.conformance_capabilities
    rows = provider.doctor_checks()
    assert [r[1] for r in rows] == ["deepinfra SDK", "DEEPINFRA_API_KEY", "DEEPINFRA_SANDBOX_PLAN"]
    assert all(isinstance(r[0], bool) for r in rows) and rows[1][0] is True
    monkeypatch.delenv("DEEPINFRA_API_KEY")
    assert provider.is_available() is False and provider.probe()[0] == "needs_setup"
    import reference.deepinfra as plugin

    registered: list = []
    plugin.register(type("Ctx", (), {"register_terminal_environment_provider": registered.append})())
    plugin.register(object())  # a host without the provider ABI: logged, not raised
    assert [p.name for p in registered] == ["deepinfra"]
    manifest = yaml.safe_load((Path(plugin.__file__).parent / "plugin.yaml").read_text())
    assert manifest["name"] == "deepinfra-sandbox" and manifest["kind"] == "backend"
    assert os.environ.get("DEEPINFRA_API_KEY") is None

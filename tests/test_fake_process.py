"""Fakes serve from their own process during a run: steered through the control channel, gone with the kit.

Also `hermes-backend-kit fake serve` with lifted limits and a control address,
the suite against such a fake started by hand, and a backend whose finalizer
calls its fake, which must not stall any check.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from upstash_box import Box, BoxError

from conformance import suite_command
from fakes import process
from fakes.control import RemoteObject
from fakes.services import FakeError, FakeOptions
from fakes.world import World
from tests.conftest import ROOT, run_suite
from tests.served import serve
from tests.test_canaries import CANARIES

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _gone(pid: int, within: float = 30.0) -> bool:
    """Has ``pid`` ended (or become a zombie) within ``within`` seconds?"""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if b") Z" in Path(f"/proc/{pid}/stat").read_bytes():
                return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def upstash(tmp_path: Path) -> Iterator[process.FakeService]:
    fake = process.spawn("upstash", tmp_path / "fake-upstash")
    try:
        yield fake
    finally:
        fake.stop()


def _sdk(fake: process.FakeService) -> dict[str, str]:
    return {"api_key": fake.env["UPSTASH_BOX_API_KEY"], "base_url": fake.env["UPSTASH_BOX_BASE_URL"]}


def _started(*argv: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], dict[str, str], str]:
    served = serve(*argv, env=env)
    return served.proc, served.exports, served.control


def test_a_spawned_fake_is_steered_through_its_world_like_an_in_process_one(upstash, tmp_path):
    assert upstash.pid is not None and upstash.pid != os.getpid()
    world = upstash.world
    assert isinstance(world, RemoteObject)
    isolation = {"isolation"} if world.world.isolated else set()  # boxes in their own namespaces
    assert world.capabilities == {"world", "world-states", "transport-faults"} | isolation
    box = Box.create(**_sdk(upstash))
    assert world.sandboxes() == {box.id: "idle"}
    handle = box.exec.session(cmd='printf nonce-77 > "$HOME"/.kit-nonce')
    assert handle.wait(10) == 0
    assert world.locate(".kit-nonce", "nonce-77") == box.id
    assert world.authenticated_with(box.id, upstash.env["UPSTASH_BOX_API_KEY"])

    since = time.monotonic()
    armed = world.faults.arm("status", "create", status=429, times=1, message="slow down")
    assert armed.fired == 0
    with pytest.raises(BoxError):
        Box.create(**_sdk(upstash))
    assert armed.fired == 1, "Armed.fired reads the fake process's live count"
    tries = world.faults.attempts("create", since=since)
    assert len(tries) == 1 and since <= tries[0] <= time.monotonic(), "attempts are on this machine's clock"
    world.faults.clear()

    world.pause(box.id)
    assert world.sandboxes()[box.id] == "paused"
    with pytest.raises(KeyError, match="no-such-box"):
        world.delete("no-such-box")
    world.delete(box.id)
    assert box.id not in world.sandboxes()

    pid, workdir = upstash.pid, tmp_path / "fake-upstash"
    upstash.stop()
    assert _gone(pid, within=1.0), "stop() returns after the fake's process ended"
    assert not workdir.exists(), "stop() leaves no file"


def test_the_fake_process_holds_none_of_the_kits_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("UPSTASH_BOX_API_KEY", "users-real-upstash-key-7f1e")
    monkeypatch.setenv("GITHUB_TOKEN", "users-real-github-token-93aa")
    fake = process.spawn("deepinfra", tmp_path / "fake")
    try:
        environ = Path(f"/proc/{fake.pid}/environ").read_bytes()
        assert b"users-real-" not in environ
        assert b"PATH=" in environ
    finally:
        fake.stop()


def test_the_fake_ends_and_cleans_up_when_the_kit_is_killed(tmp_path):
    script = (
        "import sys, time, json\n"
        "from pathlib import Path\n"
        "from fakes import process\n"
        "fake = process.spawn('deepinfra', Path(sys.argv[1]))\n"
        "print(json.dumps({'pid': fake.pid}), flush=True)\n"
        "time.sleep(600)\n"
    )
    workdir = tmp_path / "fake"
    kit = subprocess.Popen([sys.executable, "-c", script, str(workdir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert kit.stdout is not None
        fake_pid = json.loads(kit.stdout.readline())["pid"]
        assert (workdir / "sandboxes").is_dir()
        kit.send_signal(signal.SIGKILL)
        kit.wait(10)
        assert _gone(fake_pid), "the fake outlived the kit that started it"
        deadline = time.monotonic() + 10
        while workdir.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not workdir.exists(), f"the fake left {sorted(p.name for p in workdir.iterdir())}"
    finally:
        if kit.poll() is None:
            kit.kill()
            kit.wait()


def test_a_fake_that_cannot_start_says_why(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(FakeError, match=r"ended before it was ready.*(?i:address already in use)"):
            process.spawn("deepinfra", tmp_path / "fake", FakeOptions(port=port))
    with pytest.raises(FakeError, match="no sandbox cap"):
        process.spawn("cloudflare", tmp_path / "cf", FakeOptions(max_sandboxes=3))
    left = [pid for pid in process._descendants(os.getpid()) if str(tmp_path) in _cmdline(pid)]
    assert not left, "a fake that failed to start left a process"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


@pytest.fixture
def saved_environ() -> Iterator[None]:
    """KitRun exports the fake's variables and seeds credentials into os.environ: put it back afterwards."""
    before = dict(os.environ)
    for name in list(os.environ):
        if name.startswith(("DEEPINFRA_", "HERMES_")):
            del os.environ[name]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


def test_a_kit_run_serves_its_fake_from_another_process(tmp_path, saved_environ):
    from conformance.run import KitRun, RunOptions

    run = KitRun.start(RunOptions(backend="deepinfra", host="builtin"), tmp_path / "kit")
    try:
        pid = run.fake.pid
        assert pid != os.getpid() and isinstance(run.world, RemoteObject)
        assert os.environ["DEEPINFRA_BASE_URL"] == run.fake.env["DEEPINFRA_BASE_URL"]
        env = run.create(run.new_task_id("proc"))
        assert env.execute("echo $((6 * 7))")["output"].strip() == "42"
        assert len(run.world.sandboxes()) == 1
        run.release(env)
    finally:
        run.close()
    assert _gone(pid, within=1.0)


# ------------------------------------------------------------------ fake serve, by hand
def _stopped(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(30)


def test_fake_serve_lifts_the_cap_and_prints_a_control_address(tmp_path):
    proc, exports, control = _started("deepinfra", "--max-sandboxes", "2", "--root", str(tmp_path / "root"))
    try:
        script = (
            "from deepinfra import Sandbox\n"
            "made = [Sandbox.create() for _ in range(2)]\n"
            "try:\n"
            "    Sandbox.create()\n"
            "except Exception as exc:\n"
            "    print('third:', exc)\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPINFRA_")} | exports
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "third:" in done.stdout and "429" in done.stdout, done.stdout

        with pytest.raises(FakeError, match="is a deepinfra fake's, but this run needs the upstash fake"):
            process.attach(control, expect="upstash")
        fake = process.attach(control, expect="deepinfra")
        try:
            assert fake.env == exports and fake.pid == proc.pid
            assert sorted(fake.world.sandboxes().values()) == ["running", "running"]
            fake.world.faults.arm("status", "create", status=503, times=-1)
        finally:
            fake.stop()
        assert proc.poll() is None, "detaching leaves a fake started by hand serving"
        again = process.attach(control, expect="deepinfra")
        try:
            assert again.world.faults.attempts("create") == [], "detaching cleared the faults the run armed"
        finally:
            again.stop()
    finally:
        assert _stopped(proc) == 0, "Ctrl-C stops the fake cleanly"
    assert not (tmp_path / "root" / "sandboxes").exists()


def test_fake_serve_takes_the_key_and_profile_it_is_given():
    proc, exports, control = _started("cloudflare", "--api-key", "cf-token-for-this-test", "--profile", "suite")
    try:
        assert exports["HERMES_CF_TOKEN"] == "cf-token-for-this-test"
        fake = process.attach(control, expect="cloudflare")
        try:
            assert fake.env == exports and "transport-faults" in fake.world.capabilities
        finally:
            fake.stop()
    finally:
        assert _stopped(proc) == 0


def test_fake_serve_rejects_a_cap_the_fake_does_not_have():
    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "fake", "serve", "cloudflare", "--max-sandboxes", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "has no sandbox cap" in done.stderr and "— drop --max-sandboxes" in done.stderr


def test_a_hand_started_fake_refuses_several_workers(tmp_path):
    proc, _, control = _started("upstash", "--profile", "suite")
    try:
        run = run_suite(
            "--backend",
            "upstash_box",
            "--fake-control",
            control,
            "-k",
            "test_exec",
            cwd=tmp_path,
            workers=2,
            timeout=300,
        )
        assert run.returncode == 4 and "serves one run at a time" in run.output, run.output[-2000:]
    finally:
        _stopped(proc)


@pytest.mark.suite
@pytest.mark.full
def test_the_suite_certifies_deepinfra_against_a_fake_started_by_hand(tmp_path):
    """With the user's credentials exported to both sides, and none of them reaching the fake's boxes or log."""
    root = tmp_path / "fake-root"
    proc, _, control = _started(
        "deepinfra", "--max-sandboxes", "1000", "--root", str(root), env={**os.environ, **CANARIES}
    )
    seen: set[str] = set()
    leaks: list[str] = []
    done = threading.Event()

    def sample_box_files() -> None:
        """Boxes come and go during the run: read every file under the fake's root again and again."""
        while not done.wait(0.5):
            # os.walk skips a directory that vanishes under it (a sandbox deleted meanwhile).
            for folder, _, names in os.walk(root):
                for name in names:
                    path = Path(folder, name)
                    with contextlib.suppress(OSError):
                        if path.is_file() and not path.is_symlink():
                            seen.add(str(path))
                            text = path.read_bytes().decode(errors="replace")
                            leaks.extend(f"{path}: {var}" for var, value in CANARIES.items() if value in text)

    sampler = threading.Thread(target=sample_box_files, daemon=True)
    sampler.start()
    try:
        run = run_suite(
            "--backend",
            "deepinfra",
            "--fake-control",
            control,
            "-W",
            "ignore::DeprecationWarning",
            cwd=tmp_path,
            workers=0,
            timeout=1200,
            extra_env=CANARIES,
        )
    finally:
        done.set()
        sampler.join(60)
        assert _stopped(proc) == 0
    assert run.report is not None, run.output[-3000:]
    assert run.failed() == set(), run.output[-3000:]
    assert run.report["certified"], run.report["not_certified_because"]
    probe = World(namespaces=None)
    probe.close()
    assert run.report["fake_world"]["isolated"] is probe.isolated and run.report["fake_world"]["paths_note"]
    assert len(seen) > 10, f"only {len(seen)} file(s) seen under {root}: the boxes' files were hardly searched"
    assert not leaks, f"a credential's value was in a box's file: {leaks[:5]}"
    fake_log = (proc.stdout.read() if proc.stdout else "") + (proc.stderr.read() if proc.stderr else "")
    for where, text in {"the fake's output": fake_log, "the suite's output": run.output}.items():
        leaked = [name for name, value in CANARIES.items() if value in text]
        assert not leaked, f"{where} shows the value of {leaked}"


# ------------------------------------------------------------------ a finalizer that calls the fake
@pytest.mark.suite
def test_a_finalizer_that_calls_its_fake_stalls_no_check(tmp_path):
    selection = "test_exec or test_transport_faults or test_lifecycle"
    backend = ("--backend", "fakes.mutants.finalizer_calls_fake:provider", "--fake", "deepinfra")
    listed = subprocess.run(
        suite_command.command("--collect-only", *backend, "-k", selection),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    selected = {line.split("::", 1)[1] for line in listed.stdout.splitlines() if "::" in line}
    assert len(selected) > 30, listed.stdout[-2000:]
    # Generous: the run takes 1-3 minutes on a loaded 2-core machine; a stalled fake costs 60 s per collection.
    run = run_suite(*backend, "-k", selection, "-W", "ignore::DeprecationWarning", cwd=tmp_path, timeout=900)
    assert run.report is not None, run.output[-3000:]
    outcomes = {
        check["id"].split("::", 1)[1]: check["outcome"]
        for clause in run.report["clauses"]
        for check in clause["checks"]
    }
    assert set(outcomes) == selected, f"checks without a verdict: {sorted(selected - set(outcomes))}"
    assert set(outcomes.values()) <= {"passed", "failed", "skipped"}, outcomes
    # A collection during the silent-finalizer check itself may wait on the silenced service: that check's
    # own verdict.  Every other check is untouched by what the backend's finalizers do.
    assert run.failed() <= {"faults.silent-finalizer"}, run.output[-3000:]

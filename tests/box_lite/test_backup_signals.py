"""A signal at any stage of save, load or extract leaves no plaintext, no orphan box, a consistent registry.

``hermes-box`` runs as a subprocess with ``HERMES_BOX_TEST_PAUSE=STAGE``: it stops at that stage
and says so, the test signals it (SIGINT to its process group, as a terminal's Ctrl-C does, so gpg
gets it too; SIGTERM and SIGHUP to the process alone, as ``kill`` does), and then checks what is
left: the exit status 128+N, no new file under backups/ (no partial archive), nothing in TMPDIR,
no gpg process, the saved box thawed and registered as before, the box being loaded absent
everywhere, and no plaintext marker outside the saved box's own /data.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import archives
from isolation import NamespaceDriver
from reference.box_lite import backup
from reference.box_lite.boxes import BoxManager
from tests.archives.craft import PASSPHRASE, plaintext_files, snapshot
from tests.box_lite.conftest import box_processes

_OK, _WHY = NamespaceDriver(spares=0).available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}")
MARK = "PLAINTEXT-MARKER-5e0b"
SIGNALS = [signal.SIGINT, signal.SIGTERM]


def _eventually(check: Callable[[], bool], limit: float = 15.0) -> bool:
    """True once ``check`` is (a signal's effect on another process is not instantaneous)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


def _process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _stopped(pid: int) -> bool:
    """Stopped by a signal.  A shell caught forking (dash forks with vfork) waits uninterruptibly, in
    state D, for its child, which was stopped before it could exec: the shell runs no more than a
    stopped one, and shows T only once the child goes on."""
    state = _process_state(pid)
    if state == "T":
        return True
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return False
    return state == "D" and any(_process_state(int(child)) == "T" for child in children)


class Paused:
    """``hermes-box ARGS`` run until it reports ``paused at STAGE``."""

    def __init__(self, home: Path, tmpdir: Path, stage: str, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("HERMES_BOX_HOME", backup.PAUSE_ENV)}
        env.update(
            HERMES_BOX_HOME=str(home), TMPDIR=str(tmpdir), BOX_PASSPHRASE=PASSPHRASE, **{backup.PAUSE_ENV: stage}
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reference.box_lite.cli", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, as a shell job has
        )
        self.stderr = b""
        assert self.proc.stderr is not None
        wanted = f"paused at {stage}".encode()
        while wanted not in self.stderr:
            ready, _, _ = select.select([self.proc.stderr], [], [], 120)
            chunk = os.read(self.proc.stderr.fileno(), 4096) if ready else b""
            if not chunk:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"hermes-box {' '.join(args)} never paused at {stage}: {self.stderr.decode()}")
            self.stderr += chunk

    def interrupt(self, signum: int) -> tuple[int, str]:
        if signum == signal.SIGINT:
            os.killpg(self.proc.pid, signum)
        else:
            os.kill(self.proc.pid, signum)
        _out, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, (self.stderr + err).decode(errors="replace")


@pytest.fixture
def tmpdir(tmp_path: Path) -> Path:
    path = tmp_path / "tmpdir"
    path.mkdir()
    return path


@pytest.fixture
def alpha(manager: BoxManager) -> str:
    """A running box with a plaintext marker and more than a MiB of data (so saving takes a while)."""
    manager.create("alpha")
    command = manager.popen(
        "alpha",
        ["sh", "-c", f"echo {MARK} > ~/workspace/marked && head -c 3000000 /dev/urandom > ~/workspace/noise"],
    )
    assert command.wait(60) == 0
    return "alpha"


def _registry(home: Path) -> dict:
    """The registry's boxes, read from registry.json ({"format": 1, "boxes": {NAME: ...}})."""
    path = home / "config" / "registry.json"
    return json.loads(path.read_text())["boxes"] if path.exists() else {}


def _assert_clean(home: Path, tmp_path: Path, tmpdir: Path, *, backups: list[Path]) -> None:
    assert sorted((home / "backups").iterdir()) == sorted(backups), "no partial or unverified archive is left"
    assert not list(tmpdir.iterdir()), f"left in TMPDIR: {list(tmpdir.iterdir())}"
    assert not _gpgs_of(tmpdir), "a gpg of the interrupted command is still running"
    hits = [p for p in plaintext_files(tmp_path, MARK.encode()) if "boxes/alpha/" not in str(p)]
    assert not hits, f"plaintext left outside alpha's /data: {hits}"


def _gpgs_of(tmpdir: Path) -> list[str]:
    """Processes whose command line names ``tmpdir`` (gpg runs with its homedir there)."""
    return [p for p in os.listdir("/proc") if p.isdigit() and str(tmpdir).encode() in _cmdline(int(p))]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


SAVE_STAGES = ["save:locked", "save:quiesced", "save:writing", "save:written", "save:verifying"]


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("stage", SAVE_STAGES)
def test_a_signal_during_save_leaves_no_archive_and_the_box_running(
    manager: BoxManager, box_home: Path, tmp_path: Path, tmpdir: Path, alpha: str, stage: str, signum: int
):
    sleeper = manager.popen(alpha, ["sleep", "300"])
    try:
        saving = Paused(box_home, tmpdir, stage, "save", alpha)
        if stage in ("save:quiesced", "save:writing"):
            assert _eventually(lambda: _process_state(sleeper.pid) == "T"), "the box is frozen while /data is read"
        else:
            assert _process_state(sleeper.pid) != "T"
        made = [p.name for p in (box_home / "backups").iterdir()]
        if stage == "save:writing":
            assert [n for n in made if n.endswith(".partial")], "a partial archive exists to be cleaned up"
        if stage in ("save:written", "save:verifying"):
            assert [n for n in made if n.endswith(".tar.gz.gpg")], "the archive exists to be removed"

        code, err = saving.interrupt(signum)

        assert code == 128 + signum, err
        assert f"interrupted by {signum.name}" in err
        assert _eventually(lambda: _process_state(sleeper.pid) in ("S", "R")), "the box is thawed after the save"
        assert manager.state(alpha) == "running"
        assert list(_registry(box_home)) == [alpha]
        with manager.lock(alpha, "check"):  # the save's lock was released (or is recovered)
            pass
        _assert_clean(box_home, tmp_path, tmpdir, backups=[])
    finally:
        sleeper.kill()
        sleeper.wait(30)


LOAD_STAGES = ["load:validating", "load:validated", "load:restoring", "load:provisioned", "load:registered"]


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("stage", LOAD_STAGES)
def test_a_signal_during_load_leaves_no_box(
    manager: BoxManager, box_home: Path, tmp_path: Path, tmpdir: Path, alpha: str, stage: str, signum: int
):
    archive = backup.save(manager, alpha, passphrase=archives.Passphrase(PASSPHRASE))
    loading = Paused(box_home, tmpdir, stage, "load", str(archive), "beta")
    if stage in ("load:restoring", "load:provisioned", "load:registered"):
        assert (box_home / "data" / "boxes" / "beta").is_dir(), "the box exists at this stage"

    code, err = loading.interrupt(signum)

    assert code == 128 + signum, err
    assert manager.state("beta") is None
    assert not (box_home / "data" / "boxes" / "beta").exists()
    assert not (box_home / "run" / "beta").exists(), "no runtime directory of beta (lock, log) is left"
    assert list(_registry(box_home)) == [alpha], "the registry holds alpha only"
    assert not any(what.endswith(" of beta") for what in box_processes(box_home)), "no daemon of beta"
    assert manager.state(alpha) == "running"
    _assert_clean(box_home, tmp_path, tmpdir, backups=[archive])


def test_a_hangup_while_restoring_leaves_no_box(
    manager: BoxManager, box_home: Path, tmp_path: Path, tmpdir: Path, alpha: str
):
    archive = backup.save(manager, alpha, passphrase=archives.Passphrase(PASSPHRASE))
    code, _err = Paused(box_home, tmpdir, "load:restoring", "load", str(archive), "beta").interrupt(signal.SIGHUP)
    assert code == 129
    assert manager.state("beta") is None and list(_registry(box_home)) == [alpha]
    _assert_clean(box_home, tmp_path, tmpdir, backups=[archive])


@pytest.mark.parametrize(
    ("stage", "signum"), [("extract:validating", signal.SIGINT), ("extract:writing", signal.SIGTERM)]
)
def test_a_signal_during_extract_leaves_no_directory(
    manager: BoxManager, box_home: Path, tmp_path: Path, tmpdir: Path, alpha: str, stage: str, signum: int
):
    archive = backup.save(manager, alpha, passphrase=archives.Passphrase(PASSPHRASE))
    extracting = Paused(box_home, tmpdir, stage, "extract", str(archive))
    if stage == "extract:writing":
        assert [p for p in (box_home / "backups").iterdir() if p.is_dir()], "the directory exists to be removed"
    code, err = extracting.interrupt(signum)
    assert code == 128 + signum, err
    _assert_clean(box_home, tmp_path, tmpdir, backups=[archive])


@pytest.mark.parametrize("stage", ["save:quiesced", "save:writing"])
def test_a_save_killed_outright_never_leaves_the_box_frozen(
    manager: BoxManager, box_home: Path, tmpdir: Path, alpha: str, stage: str
):
    """SIGKILL gives the saver no chance to thaw: the daemon, which holds the freeze as the saver's
    connection, thaws the box as soon as that connection drops.  Meanwhile the box shows as frozen,
    and a command started during the freeze waits for the thaw rather than writing mid-archive."""
    counter = manager.popen(alpha, ["sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done"])
    count = box_home / "data" / "boxes" / alpha / "tmp" / "count"
    saving: Paused | None = None
    try:
        assert _eventually(lambda: count.is_file() and count.read_text().strip() != "")
        saving = Paused(box_home, tmpdir, stage, "save", alpha)
        assert _eventually(lambda: _stopped(counter.pid)), (
            f"the box is frozen while /data is read: the counter (pid {counter.pid}) is "
            f"{_process_state(counter.pid)!r}, the daemon says frozen={manager.frozen(alpha)}, "
            f"the box's processes: {box_processes(box_home)}, the save said: {saving.stderr.decode(errors='replace')}"
        )
        rows = json.loads(_hb(box_home, "ls", "--json").stdout)["boxes"]
        assert [r["state"] for r in rows if r["name"] == alpha] == ["frozen"]
        late: list = []  # popen returns once the command started: after the thaw
        starter = threading.Thread(target=lambda: late.append(manager.popen(alpha, ["sh", "-c", "echo > /tmp/late"])))
        starter.start()
        time.sleep(0.5)
        assert not late and not (box_home / "data" / "boxes" / alpha / "tmp" / "late").exists(), "nothing starts"
        frozen_at = count.read_text()

        os.killpg(saving.proc.pid, signal.SIGKILL)
        saving.proc.wait(30)
        killed = time.monotonic()

        assert _eventually(lambda: count.read_text() != frozen_at, limit=2.0), "the counter resumes within 2 s"
        assert time.monotonic() - killed < 2.0
        starter.join(30)
        assert late and late[0].wait(30) == 0, "the command asked for during the freeze ran after the thaw"
        assert manager.state(alpha) == "running" and not manager.frozen(alpha)
    finally:
        counter.kill()
        counter.wait(30)
        if saving is not None and saving.proc.poll() is None:  # a failed check leaves no paused save behind
            os.killpg(saving.proc.pid, signal.SIGKILL)
            saving.proc.wait(30)


def _hb(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "HERMES_BOX_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "reference.box_lite.cli", "--home", str(home), *args],
        env={**environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_what_a_save_killed_outright_leaves_is_reported_then_swept(
    manager: BoxManager, box_home: Path, tmp_path: Path, tmpdir: Path, alpha: str
):
    """The partial archive and gpg's private homedir of a saver killed mid-write: the doctor reports the
    partial, and the next save removes both (the homedir's maker is gone); then nothing is left."""
    saving = Paused(box_home, tmpdir, "save:writing", "save", alpha)
    os.killpg(saving.proc.pid, signal.SIGKILL)
    saving.proc.wait(30)
    partials = [p.name for p in (box_home / "backups").iterdir() if p.name.endswith(".partial")]
    assert partials and partials[0].startswith(f".{alpha}-"), "the killed save left its partial archive"
    assert _eventually(
        lambda: not [p for p in os.listdir("/proc") if p.isdigit() and str(tmpdir).encode() in _cmdline(int(p))]
    )
    assert [p.name for p in tmpdir.iterdir() if p.name.startswith("hermes-gpg-")], "and gpg's homedir"

    report = json.loads(_hb(box_home, "doctor", alpha, "--json", env={"TMPDIR": str(tmpdir)}).stdout)
    (row,) = [c for c in report["checks"] if c["name"] == "backup"]
    assert row["status"] == "warn" and "partial archive(s) of an interrupted save" in row["detail"], row
    assert partials[0] in row["detail"] and f"hermes-box save {alpha}" in row["fix"]

    done = _hb(box_home, "save", alpha, env={"TMPDIR": str(tmpdir), "BOX_PASSPHRASE": PASSPHRASE})
    archive = Path(done.stdout.strip())
    assert sorted((box_home / "backups").iterdir()) == [archive], "the partial is swept, the new archive kept"
    _assert_clean(box_home, tmp_path, tmpdir, backups=[archive])


def test_a_load_killed_outright_leaves_an_incomplete_box_that_is_never_called_healthy(
    manager: BoxManager, box_home: Path, tmpdir: Path, alpha: str
):
    """SIGKILL mid-restore leaves a half /data behind: the box is listed incomplete, the doctor and the
    refusals of repair and start say to remove it and load again, and doing so gives the saved tree."""
    archive = backup.save(manager, alpha, passphrase=archives.Passphrase(PASSPHRASE))
    loading = Paused(box_home, tmpdir, "load:restoring", "load", str(archive), "beta")
    os.killpg(loading.proc.pid, signal.SIGKILL)
    loading.proc.wait(30)

    rows = {r["name"]: r for r in json.loads(_hb(box_home, "ls", "--json").stdout)["boxes"]}
    assert rows["beta"]["state"] == "incomplete"
    fix = "hermes-box rm beta --force"
    done = subprocess.run(
        [sys.executable, "-m", "reference.box_lite.cli", "--home", str(box_home), "doctor", "beta", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    state = {c["name"]: c for c in json.loads(done.stdout)["checks"]}["state"]
    assert done.returncode == 1 and state["status"] == "fail" and "interrupted" in state["detail"], state
    assert fix in state["fix"]
    for command in ("repair", "start"):
        refused = subprocess.run(
            [sys.executable, "-m", "reference.box_lite.cli", "--home", str(box_home), command, "beta"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode != 0 and "was interrupted" in refused.stderr and fix in refused.stderr, refused

    _hb(box_home, "rm", "beta", "--force")
    _hb(box_home, "load", str(archive), "beta", env={"BOX_PASSPHRASE": PASSPHRASE, "TMPDIR": str(tmpdir)})
    assert manager.state("beta") == "running"
    managed = {"home/.profile", "home/.bashrc"}  # the managed block names the box; the marker dir is the doctor's

    def tree(name: str) -> dict[str, tuple]:
        return {
            k: v for k, v in snapshot(manager.data_dir(name)).items() if k not in managed and ".hermes-box" not in k
        }

    assert tree("beta") == tree(alpha) and "home/workspace/noise" in tree("beta")

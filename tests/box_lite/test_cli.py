"""``hermes-box`` end to end: the real console entry in subprocesses, a temp home, real boxes.

Every test's home is ``box_home`` (conftest), whose teardown stops every box
daemon under it and fails the test if one survives.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from isolation import NamespaceDriver
from reference.box_lite.backup import latest_backup, new_backup_path
from reference.box_lite.boxes import BoxManager
from reference.box_lite.paths import BoxHome

_OK, _WHY = NamespaceDriver(spares=0).available()
needs_boxes = pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}")
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "reference.box_lite.cli"]
PASSPHRASE = "correct horse battery staple"


def hb(home: Path, *args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 120):
    """Run ``hermes-box --home HOME ARGS`` through ``python -m`` (the module's own entry)."""
    return subprocess.run(
        [*CLI, "--home", str(home), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


def registry(home: Path) -> dict:
    path = home / "config" / "registry.json"
    return json.loads(path.read_text())["boxes"] if path.exists() else {}


def listing(home: Path) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads(ok(hb(home, "ls", "--json")).stdout)["boxes"]}


def doctor_rows(home: Path, name: str) -> tuple[int, dict[str, dict]]:
    done = hb(home, "doctor", name, "--json")
    report = json.loads(done.stdout)
    assert report["ok"] == (done.returncode == 0), done.stderr
    return done.returncode, {c["name"]: c for c in report["checks"]}


def assert_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, f"exit {done.returncode}, wanted {code}\n{done.stderr}"
    first = done.stderr.strip().splitlines()[-2 if done.stderr.strip().endswith(")") else -1]
    assert first.startswith("error: ") and " — " in first, done.stderr
    for word in words:
        assert word in done.stderr, f"{word!r} not in:\n{done.stderr}"
    assert "Traceback" not in done.stderr


# --- no box needed ------------------------------------------------------------------------------


def test_bad_input_exits_2_with_what_and_fix(box_home: Path) -> None:
    assert_error(hb(box_home, "new", "Bad_Name"), 2, "'Bad_Name' is not a valid box name", "alpha")
    assert_error(hb(box_home, "stop", "ghost"), 2, "there is no box named ghost", "hermes-box new ghost")
    assert_error(hb(box_home, "rm", "ghost", "--force"), 2, "no box named ghost")
    assert_error(hb(box_home, "exec", "ghost"), 2, "exec needs a command")
    assert_error(hb(box_home, "load", str(box_home / "missing.gpg"), "beta"), 2, "no archive at")
    debug = hb(box_home, "--debug", "stop", "ghost")  # --debug adds the traceback
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "BoxNotFound" in debug.stderr
    # argparse's own complaints carry the same prefix and exit code
    done = hb(box_home, "new")
    assert done.returncode == 2 and "error: " in done.stderr and "--help" in done.stderr
    # box.env is read by every command that uses boxes; a bad line names itself and the fix
    (box_home / "config").mkdir()
    (box_home / "config" / "box.env").write_text("# settings\nNETWROK=off\n")
    assert_error(hb(box_home, "ls"), 2, "box.env line 2: unknown setting NETWROK", "did you mean NETWORK")
    assert registry(box_home) == {}


def test_enter_without_a_terminal_says_to_use_exec(box_home: Path) -> None:
    assert_error(hb(box_home, "enter", "alpha", input=""), 2, "enter needs a terminal", "exec")


def test_ls_of_an_empty_home(box_home: Path) -> None:
    done = ok(hb(box_home, "ls"))
    assert done.stdout == "" and "no boxes" in done.stderr
    assert json.loads(ok(hb(box_home, "ls", "--json")).stdout)["boxes"] == []


def test_the_installed_console_script_is_the_same_command(box_home: Path) -> None:
    script = shutil.which("hermes-box")
    if script is None:
        pytest.skip("the hermes-box console script is not installed (pip install -e .)")
    done = subprocess.run([script, "--home", str(box_home), "ls", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["boxes"] == []
    bad = subprocess.run([script, "--home", str(box_home), "start", "Nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")


def test_latest_backup_is_the_newest_of_this_box_only(tmp_path: Path) -> None:
    home = BoxHome.at(tmp_path)
    home.backups_dir.mkdir(parents=True)
    assert latest_backup(home, "alpha") is None
    for fname in (
        "alpha-20260101-000000Z.tar.gz.gpg",
        "alpha-20260102-000000Z.tar.gz.gpg",
        "alpha-2-20270101-000000Z.tar.gz.gpg",  # box alpha-2's, newer
        "alpha-20260102-000000Z.tar.gz.gpg.extracted",
        "alpha-notes.tar.gz.gpg",
    ):
        (home.backups_dir / fname).write_bytes(b"x")
    found = latest_backup(home, "alpha")
    assert found is not None and found.path.name == "alpha-20260102-000000Z.tar.gz.gpg"
    assert found.when_text == "2026-01-02T00:00:00Z"
    other = latest_backup(home, "alpha-2")
    assert other is not None and other.path.name == "alpha-2-20270101-000000Z.tar.gz.gpg"


def test_ls_rows_take_a_box_s_own_backups_only(tmp_path: Path) -> None:
    """What `ls`, `rm` and the doctor report (BoxInfo.last_backup): a box never takes the backups of a
    box whose name extends its own (beta has none, though beta-2 has one), and the tenth save of one
    second beats the second."""
    home = BoxHome.at(tmp_path).ensure()
    for fname in (
        "alpha-20260101-000000Z.tar.gz.gpg",
        "alpha-20260101-000000Z-2.tar.gz.gpg",
        "alpha-20260101-000000Z-10.tar.gz.gpg",
        "alpha-2-20260601-000000Z.tar.gz.gpg",
        "alpha-2-x.tar.gz.gpg",
        "beta-2-20260601-000000Z.tar.gz.gpg",
    ):
        (home.backups_dir / fname).write_bytes(b"x")
    manager = BoxManager(home)
    alpha, alpha_2 = manager.info("alpha").last_backup, manager.info("alpha-2").last_backup
    assert alpha is not None and alpha.path.name == "alpha-20260101-000000Z-10.tar.gz.gpg"
    assert alpha_2 is not None and alpha_2.path.name == "alpha-2-20260601-000000Z.tar.gz.gpg"
    assert manager.info("beta").last_backup is None
    # the names save makes are the names read back
    made = new_backup_path(home, "alpha-2")
    made.write_bytes(b"x")
    newest = latest_backup(home, "alpha-2")
    assert newest is not None and newest.path == made
    assert latest_backup(home, "alpha") == alpha


# --- with boxes ---------------------------------------------------------------------------------


@needs_boxes
def test_new_ls_exec_stop_start_doctor_repair_rm(box_home: Path) -> None:
    done = ok(hb(box_home, "new", "alpha"))
    assert "created box alpha" in done.stderr
    for row in ("state", "isolation", "/data", "tmux session", "registry", "lock", "backup"):
        assert f"  {row}" in done.stdout, done.stdout
    assert "alpha: healthy" in done.stdout
    assert (box_home / "config" / "box.env").is_file()  # a commented default, for the user to edit
    manifest = box_home / "config" / "runtime-manifest"
    assert manifest.stat().st_mode & 0o777 == 0o600 and "python" in json.loads(manifest.read_text())["tools"]

    table = ok(hb(box_home, "ls")).stdout.splitlines()
    assert table[0].split() == ["NAME", "STATE", "LAST", "BACKUP", "AGE"]
    assert table[1].split() == ["alpha", "running", "never", "-"]
    assert listing(box_home)["alpha"]["state"] == "running"

    # exec: the exit code, stdout and stderr apart, stdin through, ~/workspace as the working directory
    done = hb(box_home, "exec", "alpha", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (done.returncode, done.stdout, done.stderr) == (7, "out\n", "err\n")
    done = ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", "pwd; tr a-z A-Z", input="precious\n"))
    assert done.stdout == "/home/agent/workspace\nPRECIOUS\n"
    ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", "echo precious > ~/workspace/f"))
    assert ok(
        hb(box_home, "exec", "alpha", "--env", "X=1", "--cwd", "/data", "--", "sh", "-c", "echo $X $PWD")
    ).stdout == ("1 /data\n")

    # stop keeps /data; the doctor of a stopped box skips what needs it running
    assert "stopped alpha" in ok(hb(box_home, "stop", "alpha")).stderr
    assert listing(box_home)["alpha"]["state"] == "stopped"
    code, rows = doctor_rows(box_home, "alpha")
    assert code == 0 and rows["in-box checks"]["status"] == "skip"
    assert rows["/data"]["status"] == "ok" and "seen from the host while stopped" in rows["/data"]["detail"]
    if os.geteuid() == 0:  # a stopped box's /data is still checked, from the host: ~/workspace taken from the box
        workspace = box_home / "data" / "boxes" / "alpha" / "data" / "home" / "workspace"
        owner = workspace.stat()
        os.chown(workspace, 0, 0)
        code, rows = doctor_rows(box_home, "alpha")
        assert code == 1 and "/home/agent/workspace belongs to 0:0" in rows["/data"]["detail"], rows["/data"]
        os.chown(workspace, owner.st_uid, owner.st_gid)
    ok(hb(box_home, "start", "alpha"))
    assert listing(box_home)["alpha"]["state"] == "running"
    assert ok(hb(box_home, "exec", "alpha", "--", "cat", "f")).stdout == "precious\n"

    # doctor: every check passes, /data proven durable by the marker written at the stop
    code, rows = doctor_rows(box_home, "alpha")
    assert code == 0, rows
    assert rows["isolation"]["status"] == "ok" and "own PID namespace" in rows["isolation"]["detail"]
    assert rows["/data"]["status"] == "ok" and "durable" in rows["/data"]["detail"]
    assert rows["registry"]["status"] == "ok" and rows["lock"]["status"] == "ok"
    assert rows["backup"]["status"] == "warn" and "hermes-box save alpha" in rows["backup"]["fix"]

    # repair keeps /data
    done = ok(hb(box_home, "repair", "alpha"))
    assert "/data kept" in done.stderr and "alpha: healthy" in done.stdout
    assert ok(hb(box_home, "exec", "alpha", "--", "cat", "f")).stdout == "precious\n"

    # rm asks for the exact name: a wrong one (or none) removes nothing
    assert_error(hb(box_home, "rm", "alpha", input="alhpa\n"), 2, "does not match; nothing was removed", "--force")
    assert_error(hb(box_home, "rm", "alpha", input=""), 2, "does not match")
    assert "alpha" in listing(box_home)
    done = ok(hb(box_home, "rm", "alpha", input="alpha\n"))
    assert "no backup of alpha found" in done.stderr and "removed box alpha" in done.stderr
    assert listing(box_home) == {} and registry(box_home) == {}
    assert not (box_home / "data" / "boxes" / "alpha").exists()


@needs_boxes
def test_links_save_would_refuse_are_warned_by_the_doctor_then_named_by_save(box_home: Path) -> None:
    """A Python venv made without --copies links bin/python to /usr/bin/python3.  No archive keeps
    such a link (load refuses it), so the doctor warns before any save, and save refuses naming the
    link, why and the fix, leaving no archive; a link kept inside /data saves."""
    env = {"BOX_PASSPHRASE": PASSPHRASE}
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    venv = "mkdir -p ~/workspace/.venv/bin && ln -s /usr/bin/python3 ~/workspace/.venv/bin/python"
    ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", venv))

    code, rows = doctor_rows(box_home, "alpha")
    links = rows["/data links"]
    assert code == 0 and links["status"] == "warn", links
    assert "1 symbolic link under /data" in links["detail"] and "save will refuse it" in links["detail"]
    assert "/home/agent/workspace/.venv/bin/python -> /usr/bin/python3" in links["detail"]
    assert "python3 -m venv --copies" in links["fix"]

    refused = hb(box_home, "save", "alpha", env=env)
    assert_error(
        refused,
        2,
        "box alpha cannot be saved",
        "/home/agent/workspace/.venv/bin/python -> /usr/bin/python3",
        "load refuses them",
        "python3 -m venv --copies DIR",
        "hermes-box doctor alpha",
    )
    assert list((box_home / "backups").iterdir()) == []

    relink = "cd ~/workspace/.venv/bin && touch python3 && ln -sfn python3 python"
    ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", relink))
    assert doctor_rows(box_home, "alpha")[1]["/data links"]["status"] == "ok"
    archive = Path(ok(hb(box_home, "save", "alpha", env=env)).stdout.strip())
    assert archive.parent == box_home / "backups" and archive.is_file()

    # Links that each read as inside but climb out through one another: save names the one that
    # reaches the box home's registry (and the link it goes through), the doctor too.
    chain = (
        "cd /data && mkdir -p a/b && ln -s ../.. a/b/d && ln -s d/../.. a/b/e && ln -s a/b/e/../config/registry.json g"
    )
    ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", chain))
    assert "/data/g -> a/b/e/../config/registry.json" in doctor_rows(box_home, "alpha")[1]["/data links"]["detail"]
    assert_error(hb(box_home, "save", "alpha", env=env), 2, "/data/g -> a/b/e/../config/registry.json")


@needs_boxes
def test_rm_reports_the_most_recent_backup(box_home: Path) -> None:
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    backups = box_home / "backups"
    (backups / "alpha-20260101-000000Z.tar.gz.gpg").write_bytes(b"old")
    (backups / "alpha-20260301-101500Z.tar.gz.gpg").write_bytes(b"new")
    row = listing(box_home)["alpha"]
    assert Path(row["last_backup"]).name == "alpha-20260301-101500Z.tar.gz.gpg"
    assert row["last_backup_at"] == "2026-03-01T10:15:00Z"
    assert "alpha-20260301-101500Z.tar.gz.gpg" in ok(hb(box_home, "ls")).stdout
    done = ok(hb(box_home, "rm", "alpha", "--force"))
    assert f"most recent backup of alpha: {backups / 'alpha-20260301-101500Z.tar.gz.gpg'}" in done.stderr
    assert listing(box_home) == {}


@needs_boxes
def test_exec_forwards_signals_and_reports_how_the_command_ended(box_home: Path) -> None:
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    script = 'trap "echo got-term; exit 42" TERM; echo ready; while :; do sleep 0.05; done'
    proc = subprocess.Popen(
        [*CLI, "--home", str(box_home), "exec", "alpha", "--", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (42, "got-term\n"), err  # the command's own answer to TERM
    # A command ended by a signal: 128 + its number, as a shell reports it.
    proc = subprocess.Popen(
        [*CLI, "--home", str(box_home), "exec", "alpha", "--", "sh", "-c", "echo ready; exec sleep 60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert hb(box_home, "exec", "alpha", "--", "sh", "-c", "kill -HUP $$").returncode == 129


HOLD_LOCK = """
    import sys, time
    from reference.box_lite.locks import BoxLock
    from reference.box_lite.paths import BoxHome
    BoxLock(BoxHome.at(sys.argv[1]), sys.argv[2], "save").acquire()
    print("held", flush=True)
    time.sleep(300)
"""


@needs_boxes
def test_a_held_lock_names_its_holder_and_a_dead_holders_lock_is_recovered(box_home: Path) -> None:
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLD_LOCK), str(box_home), "alpha"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        for args in (("stop", "alpha"), ("rm", "alpha", "--force"), ("repair", "alpha")):
            assert_error(hb(box_home, *args), 1, f"box alpha is locked by PID {holder.pid}", "(save) since")
        assert listing(box_home)["alpha"]["state"] == "running"  # nothing happened
        _, rows = doctor_rows(box_home, "alpha")  # the doctor reads, it does not need the lock
        assert rows["lock"]["status"] == "warn" and f"PID {holder.pid}" in rows["lock"]["detail"]
    finally:
        holder.kill()
        holder.wait()
    # Its owner was killed without releasing it: the next mutation takes it.
    _, rows = doctor_rows(box_home, "alpha")
    assert "stale record" in rows["lock"]["detail"]
    ok(hb(box_home, "stop", "alpha"))
    assert listing(box_home)["alpha"]["state"] == "stopped"


@needs_boxes
def test_doctor_fails_on_lost_durability_and_on_a_registry_that_disagrees(box_home: Path) -> None:
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    ok(hb(box_home, "stop", "alpha"))
    marker = box_home / "data" / "boxes" / "alpha" / "data" / ".hermes-box" / "stop-marker"
    assert marker.is_file()
    marker.write_text("something else")  # as if /data had been replaced behind the box's back
    ok(hb(box_home, "start", "alpha"))
    code, rows = doctor_rows(box_home, "alpha")
    assert code == 1 and rows["/data"]["status"] == "fail"
    assert "marker written at the last stop" in rows["/data"]["detail"] and "load" in rows["/data"]["fix"]
    assert "NOT healthy" in hb(box_home, "doctor", "alpha").stdout

    # The registry loses the box: the doctor fails and names repair; repair registers it again, /data kept.
    ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", "echo kept > f"))
    path = box_home / "config" / "registry.json"
    data = json.loads(path.read_text())
    del data["boxes"]["alpha"]
    path.write_text(json.dumps(data))
    code, rows = doctor_rows(box_home, "alpha")
    assert code == 1 and rows["registry"]["status"] == "fail" and "repair" in rows["registry"]["fix"]
    ok(hb(box_home, "repair", "alpha"))  # its doctor passes: /data as it is now is the new baseline
    assert "alpha" in registry(box_home)
    code, rows = doctor_rows(box_home, "alpha")
    assert code == 0 and rows["registry"]["status"] == "ok" and rows["state"]["status"] == "ok"
    assert ok(hb(box_home, "exec", "alpha", "--", "cat", "f")).stdout == "kept\n"


@needs_boxes
def test_doctor_is_bounded_when_the_box_does_not_answer(box_home: Path) -> None:
    """A daemon that does not answer (stopped with SIGSTOP) costs one check's timeout, not the socket's."""
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    daemon = int((box_home / "run" / "alpha" / "daemon.pid").read_text().split()[0])
    os.kill(daemon, signal.SIGSTOP)
    try:
        code, rows = doctor_rows(box_home, "alpha")
    finally:
        os.kill(daemon, signal.SIGCONT)
    assert code == 1
    assert rows["isolation"]["status"] == "fail" and "did not answer within" in rows["isolation"]["detail"]
    assert rows["/data"]["status"] == "skip" and rows["tmux session"]["status"] == "skip"
    assert rows["registry"]["status"] == "ok"  # the host-side checks still ran
    assert doctor_rows(box_home, "alpha")[0] == 0  # answering again, it is healthy


@needs_boxes
def test_no_network_box(box_home: Path) -> None:
    ok(hb(box_home, "new", "alpha", "--no-network", "--no-doctor"))
    assert listing(box_home)["alpha"]["network"] is False
    assert _interfaces(box_home, "alpha") == ["lo"]  # its own network namespace: loopback only


def _interfaces(home: Path, name: str) -> list[str]:
    return ok(hb(home, "exec", name, "--", "sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1")).stdout.split()


@needs_boxes
@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed (nox -s tests installs gnupg)")
def test_a_box_s_settings_travel_with_its_archive(box_home: Path) -> None:
    env = {"BOX_PASSPHRASE": PASSPHRASE}
    ok(hb(box_home, "new", "alpha", "--no-network", "--no-doctor", "--pids-max", "128"))
    archive = ok(hb(box_home, "save", "alpha", env=env)).stdout.strip()

    done = ok(hb(box_home, "load", archive, "beta", env=env))
    assert "network off (loopback only), as the saved box had it" in done.stderr
    assert "limits as the saved box had them: PIDS_MAX=128" in done.stderr
    record = json.loads((box_home / "data" / "boxes" / "beta" / "box.json").read_text())
    assert record["limits"] == {"pids_max": 128}
    assert listing(box_home)["beta"]["network"] is False and _interfaces(box_home, "beta") == ["lo"]

    done = ok(hb(box_home, "load", archive, "gamma", "--network", env=env))
    assert "network on as asked; the saved box had it off (loopback only)" in done.stderr
    assert listing(box_home)["gamma"]["network"] is True and len(_interfaces(box_home, "gamma")) > 1


@needs_boxes
@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed (nox -s tests installs gnupg)")
def test_save_load_extract_through_the_command_line(box_home: Path) -> None:
    env = {"BOX_PASSPHRASE": PASSPHRASE}
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", "echo precious > ~/workspace/f"))
    done = ok(hb(box_home, "save", "alpha", env=env))
    archive = Path(done.stdout.strip())
    assert archive.parent == box_home / "backups" and archive.name.startswith("alpha-")
    assert "encrypted and verified" in done.stderr and PASSPHRASE not in done.stderr + done.stdout
    assert "\x1b[" not in done.stderr  # no progress bar when not on a terminal
    assert listing(box_home)["alpha"]["last_backup"] == str(archive)

    # a wrong passphrase is refused before any box exists
    assert_error(hb(box_home, "load", str(archive), "gamma", env={"BOX_PASSPHRASE": "wrong"}), 2)
    assert "gamma" not in registry(box_home) and not (box_home / "data" / "boxes" / "gamma").exists()

    done = ok(hb(box_home, "load", str(archive), "beta", env=env))
    assert "beta: healthy" in done.stdout
    assert ok(hb(box_home, "exec", "beta", "--", "cat", "f")).stdout == "precious\n"

    done = ok(hb(box_home, "extract", str(archive), env=env))
    target = Path(done.stdout.strip())
    assert target.parent == box_home / "backups" and "secret material" in done.stderr
    assert (target / "data" / "home" / "workspace" / "f").read_text() == "precious\n"


@needs_boxes
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_during_load_exits_128_plus_n_and_leaves_no_box(box_home: Path, signum: int, code: int) -> None:
    import archives

    tree = box_home.parent / "tree"
    (tree / "home" / "workspace").mkdir(parents=True)
    (tree / "home" / "workspace" / "f").write_text("precious\n")
    archive = box_home.parent / "alpha.tar.gz.gpg"
    archives.write_tree(tree, archive, kind="box", name="alpha", passphrase=archives.Passphrase(PASSPHRASE))
    env = {**os.environ, "BOX_PASSPHRASE": PASSPHRASE, "HERMES_BOX_TEST_PAUSE": "load:registered"}
    proc = subprocess.Popen(
        [*CLI, "--home", str(box_home), "load", str(archive), "beta"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == "hermes-box: paused at load:registered"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert f"error: interrupted by {signal.Signals(signum).name}" in err
    assert registry(box_home) == {}
    assert not (box_home / "data" / "boxes" / "beta").exists()


def _on_a_terminal(home: Path, args: list[str], answers: list[str], timeout: float = 120) -> tuple[list[str], str, int]:
    """Run ``hermes-box`` on a pseudo-terminal of its own, answering each passphrase prompt in turn:
    (what the terminal showed before each prompt, what it showed after the last, the exit status)."""
    import pty
    import select
    import time

    env = {k: v for k, v in os.environ.items() if k != "BOX_PASSPHRASE"}
    env["TERM"] = "xterm"
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its controlling terminal, as a user's would be
        try:
            os.chdir(ROOT)
            os.execve(sys.executable, [*CLI, "--home", str(home), *args], env)
        finally:
            os._exit(127)
    shown, before_prompts = "", []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(fd, 65536).decode("utf-8", "replace")
                except OSError:  # EIO: the child has closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            prompt = "Repeat the passphrase: " if before_prompts else "Passphrase: "
            if len(before_prompts) < len(answers) and shown.endswith(prompt):
                before_prompts.append(shown[: -len(prompt)])
                shown = ""
                os.write(fd, answers[len(before_prompts) - 1].encode() + b"\r")
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    return before_prompts, shown, os.waitstatus_to_exitcode(status)


@needs_boxes
def test_the_passphrase_is_asked_on_a_terminal_before_any_progress_is_drawn(box_home: Path) -> None:
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    before, after, code = _on_a_terminal(box_home, ["save", "alpha"], [PASSPHRASE, PASSPHRASE])
    assert code == 0 and len(before) == 2, (code, before, after)
    assert not any("saving" in text or "\x1b[" in text for text in before), before  # nothing drawn over the prompt
    assert "encrypted and verified" in after and PASSPHRASE not in "".join(before) + after
    (archive,) = (box_home / "backups").glob("alpha-*.tar.gz.gpg")

    before, after, code = _on_a_terminal(box_home, ["extract", str(archive)], [PASSPHRASE])
    assert code == 0 and len(before) == 1, (code, before, after)
    assert "extracting" not in before[0] and "\x1b[" not in before[0], before
    assert "secret material" in after


@needs_boxes
def test_doctor_and_repair_name_the_real_problem_and_its_fix(box_home: Path) -> None:
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    # ~/workspace replaced by a link to a host path: repair names the path and how to move it aside.
    ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", "mv ~/workspace ~/w; ln -s /etc/hostname ~/workspace"))
    assert_error(
        hb(box_home, "repair", "alpha"),
        1,
        "/home/agent/workspace is a symbolic link",
        "hermes-box exec alpha -- mv /home/agent/workspace /home/agent/workspace.old",
    )
    ok(hb(box_home, "exec", "alpha", "--", "sh", "-c", "rm ~/workspace; mv ~/w ~/workspace"))
    ok(hb(box_home, "repair", "alpha"))

    # The daemon killed: the box is broken, and the doctor's fix is start (as the docs say), not repair.
    manager = BoxManager(BoxHome.resolve(str(box_home)))
    pid = manager.daemon_pid("alpha")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    code, rows = doctor_rows(box_home, "alpha")
    assert code != 0 and rows["state"]["status"] == "fail", rows["state"]
    state = rows["state"]
    assert "daemon is gone" in state["detail"] and state["fix"] == "hermes-box start alpha (keeps /data)", state
    ok(hb(box_home, "start", "alpha"))
    assert doctor_rows(box_home, "alpha")[0] == 0


FORK_LOOP = """
import os, signal, time
children = []
while len(children) < 1000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
print(len(children))
for pid in children:
    os.kill(pid, signal.SIGKILL)
"""


@needs_boxes
@pytest.mark.skipif(os.geteuid() != 0, reason="making cgroups takes root here")
def test_pids_max_stops_a_fork_loop_in_the_box_and_not_on_the_host(box_home: Path) -> None:
    (box_home / "config").mkdir(parents=True, exist_ok=True)
    (box_home / "config" / "box.env").write_text("PIDS_MAX=256\n")
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    _code, rows = doctor_rows(box_home, "alpha")
    if rows["limits"]["status"] != "ok":
        pytest.skip(f"no pids controller to use here: {rows['limits']['detail']}")
    assert "PIDS_MAX=256" in rows["limits"]["detail"], rows["limits"]
    group = Path(rows["limits"]["detail"].split("(cgroup ", 1)[1].rstrip(")"))

    forked = int(ok(hb(box_home, "exec", "alpha", "--", "python3", "-c", FORK_LOOP)).stdout)
    assert 200 < forked < 256, forked  # the box's own processes count too
    assert subprocess.run(["true"]).returncode == 0  # the host forks as before

    # A box's own flag overrides box.env; its cgroup goes when it stops.
    ok(hb(box_home, "new", "beta", "--no-doctor", "--pids-max", "64"))
    assert int(ok(hb(box_home, "exec", "beta", "--", "python3", "-c", FORK_LOOP)).stdout) < 64
    ok(hb(box_home, "stop", "alpha"))
    assert not group.exists(), "the box's cgroup is removed when it stops"

"""The Upstash Box fake driven by the real upstash_box SDK (sync client): lifecycle, exec, files, labels, auth.

The exec session, faults, the async client and backpressure have their own modules.
"""

from __future__ import annotations

import base64
import os
import time

import httpx
import pytest
from upstash_box import Box, BoxError, EphemeralBox

from fakes.world import DELETED

from .helpers import Fake, eventually

MIB = 1024 * 1024


# ------------------------------------------------------------------ create, get, list
def test_create_is_polled_through_the_creating_phase(fake: Fake):
    fake.world.create_delay_s = 0.4
    started = time.monotonic()
    box = fake.create(name="slow", labels=["hermes"], size="medium", runtime="python", keep_alive=True)
    elapsed = time.monotonic() - started
    assert elapsed >= 1.9, "the SDK got an idle box without polling; the creating phase did not happen"
    data = httpx.get(f"{fake.url}/v2/box/{box.id}", headers=fake.headers).json()
    assert data["status"] == "idle"
    assert (data["name"], data["labels"], data["size"], data["runtime"], data["keep_alive"]) == (
        "slow",
        ["hermes"],
        "medium",
        "python",
        True,
    )
    assert isinstance(data["created_at"], int) and isinstance(data["updated_at"], int)
    assert data["created_at"] > 1_600_000_000_000, "timestamps must be integer milliseconds"


def test_a_creating_box_reports_creating_then_idle(fake: Fake):
    fake.world.create_delay_s = 1.5  # long enough for the next request on a loaded machine
    created = httpx.post(f"{fake.url}/v2/box", headers=fake.headers, json={"name": "c"}).json()
    assert created["status"] == "creating"
    box_id = created["id"]
    refused = httpx.post(f"{fake.url}/v2/box/{box_id}/exec", headers=fake.headers, json={"command": ["true"]})
    assert refused.status_code == 409 and "being created" in refused.json()["error"]
    assert eventually(
        lambda: httpx.get(f"{fake.url}/v2/box/{box_id}", headers=fake.headers).json()["status"] == "idle", 5
    )


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"size": "huge"}, "invalid size"),
        ({"runtime": "cobol"}, "invalid runtime"),
        ({"labels": ["has space"]}, "invalid label"),
        ({"labels": ["a" * 21]}, "invalid label"),
        ({"labels": ["a", "b", "c", "d", "e", "f"]}, "too many labels"),
        ({"name": "a/b"}, "name must be"),
        ({"env": {"A": 1}}, "env_vars"),
    ],
)
def test_create_rejects_invalid_bodies(fake: Fake, config, fragment):
    with pytest.raises(BoxError) as info:
        fake.create(**config)
    assert info.value.status_code == 400 and fragment in info.value.message
    assert Box.list(**fake.kw) == []


def test_get_by_id_and_by_name(fake: Fake):
    box = fake.create(name="named")
    assert Box.get(box.id, **fake.kw).id == box.id
    assert Box.get_by_name("named", **fake.kw).id == box.id
    with pytest.raises(BoxError) as info:
        Box.get_by_name("nobody", **fake.kw)
    assert info.value.status_code == 404 and "nobody" in info.value.message


def test_boxes_of_another_key_are_invisible(fake: Fake):
    box = fake.create(name="private")
    other = "ubx_other_" + os.urandom(4).hex()
    fake.server.service.add_key(other)
    kw = {**fake.kw, "api_key": other}
    with pytest.raises(BoxError) as info:
        Box.get(box.id, **kw)
    assert info.value.status_code == 404
    assert Box.list(**kw) == []
    assert Box.create(name="private", **kw).id != box.id, "names are per key"


def test_list_filters_by_label(fake: Fake):
    a = fake.create(labels=["hermes", "laptop"])
    b = fake.create(labels=["hermes"])
    fake.create(labels=["other"])
    assert {d.id for d in Box.list(label="hermes", **fake.kw)} == {a.id, b.id}
    assert [d.id for d in Box.list(label="laptop", **fake.kw)] == [a.id]
    assert len(Box.list(**fake.kw)) == 3
    listed = httpx.get(f"{fake.url}/v2/box", headers=fake.headers).json()
    assert isinstance(listed, list), "the list is a bare JSON array"


def test_name_conflict_is_409(fake: Fake):
    fake.create(name="twice")
    with pytest.raises(BoxError) as info:
        fake.create(name="twice")
    assert info.value.status_code == 409 and "twice" in info.value.message


def test_quota_counts_paused_boxes_but_not_deleted_ones(fake: Fake):
    fake.settings.quota = 3
    boxes = [fake.create() for _ in range(3)]
    boxes[0].pause()
    with pytest.raises(BoxError) as info:
        fake.create()
    assert info.value.status_code == 403
    assert "box limit reached" in info.value.message and "paused boxes count" in info.value.message
    boxes[1].delete()
    fake.create()  # a deleted box frees its slot


def test_default_quota_is_ten(fake: Fake):
    for i in range(10):
        assert httpx.post(f"{fake.url}/v2/box", headers=fake.headers, json={"name": f"b{i}"}).status_code == 200
    refused = httpx.post(f"{fake.url}/v2/box", headers=fake.headers, json={})
    assert refused.status_code == 403 and "10 of 10" in refused.json()["error"]


def test_ephemeral_boxes(fake: Fake):
    box = EphemeralBox.create(ttl=60, **fake.kw)
    assert box.expires_at > time.time() * 1000
    assert box.exec.command("echo eph").stdout == "eph\n"
    box.delete()
    assert Box.list(**fake.kw) == []


# ------------------------------------------------------------------ delete
def test_delete_single_then_404(fake: Fake):
    box = fake.create(name="gone")
    box_id = box.id
    box.delete()
    with pytest.raises(BoxError) as info:
        Box.get(box_id, **fake.kw)
    assert info.value.status_code == 404
    again = httpx.delete(f"{fake.url}/v2/box/{box_id}", headers=fake.headers)
    assert again.status_code == 404 and "error" in again.json()
    fake.create(name="gone")  # the name is free again


def test_deleted_box_as_a_record_when_configured(fake: Fake):
    fake.settings.deleted_visible = True
    box = fake.create()
    box_id = box.id
    box.delete()
    assert Box.get(box_id, **fake.kw)  # no 404
    data = httpx.get(f"{fake.url}/v2/box/{box_id}", headers=fake.headers).json()
    assert data["status"] == DELETED
    assert [d.status for d in Box.list(**fake.kw)] == [DELETED]
    assert httpx.delete(f"{fake.url}/v2/box/{box_id}", headers=fake.headers).status_code == 404


def test_bulk_delete(fake: Fake):
    keep = fake.create()
    doomed = [fake.create() for _ in range(2)]
    Box.delete_boxes(box_ids=[b.id for b in doomed], **fake.kw)
    assert [d.id for d in Box.list(**fake.kw)] == [keep.id]
    response = httpx.request("DELETE", f"{fake.url}/v2/box", headers=fake.headers, json={"ids": [keep.id, "box_nope"]})
    assert response.json()["deleted"] == [keep.id] and response.json()["not_found"] == ["box_nope"]
    empty = httpx.request("DELETE", f"{fake.url}/v2/box", headers=fake.headers, json={"ids": []})
    assert empty.status_code == 400 and "ids" in empty.json()["error"]


# ------------------------------------------------------------------ pause, resume, status
def test_pause_resume_and_status(fake: Fake):
    box = fake.create()
    assert box.get_status() == {"status": "idle"}
    box.pause()
    assert box.get_status()["status"] == "paused"
    assert Box.get(box.id, **fake.kw) and _status(fake, box.id) == "paused"
    box.pause()  # pausing a paused box is harmless
    box.resume()
    assert box.get_status()["status"] == "idle"


def test_pause_freezes_running_commands(fake: Fake):
    box = fake.create()
    box.exec.command("(while true; do date +%s%N >> /workspace/home/ticks; sleep 0.02; done) >/dev/null 2>&1 &")
    time.sleep(0.2)
    box.pause()
    ticks = fake.world.get(box.id).workspace_dir / "ticks"  # type: ignore[union-attr]
    frozen = ticks.read_text().count("\n")
    time.sleep(0.2)
    assert ticks.read_text().count("\n") == frozen, "processes kept running in a paused box"
    box.resume()
    time.sleep(0.2)
    assert ticks.read_text().count("\n") > frozen


def test_pause_and_resume_delays(fake: Fake):
    fake.world.pause_delay_s = fake.world.resume_delay_s = 0.2
    box = fake.create()
    box.pause()
    assert box.get_status()["status"] == "pausing"
    time.sleep(0.3)
    assert box.get_status()["status"] == "paused"
    box.resume()
    assert box.get_status()["status"] == "resuming"
    time.sleep(0.3)
    assert box.get_status()["status"] == "idle"


def test_keep_alive_boxes_cannot_be_paused(fake: Fake):
    box = fake.create(keep_alive=True)
    assert box.keep_alive
    with pytest.raises(BoxError, match="Keep-alive"):
        box.pause()  # refused by the SDK before any request
    raw = httpx.post(f"{fake.url}/v2/box/{box.id}/pause", headers=fake.headers)
    assert raw.status_code == 409 and raw.json() == {"error": "Keep-alive boxes cannot be paused"}
    assert _status(fake, box.id) == "idle"


def _status(fake: Fake, box_id: str) -> str:
    return httpx.get(f"{fake.url}/v2/box/{box_id}/status", headers=fake.headers).json()["status"]


# ------------------------------------------------------------------ REST exec and exec-stream
def test_exec_command(fake: Fake):
    box = fake.create(env={"GREETING": "hi"})
    ok = box.exec.command("echo $GREETING; pwd; echo warn >&2")
    assert (ok.exit_code, ok.status, ok.stdout, ok.stderr) == (0, "completed", "hi\n/workspace/home\n", "warn\n")
    bad = box.exec.command("echo out; echo oops >&2; exit 7")
    assert (bad.exit_code, bad.status, bad.result) == (7, "failed", "oops\n")


def test_exec_honours_cd(fake: Fake):
    box = fake.create()
    box.exec.command("mkdir -p sub/dir")
    box.cd("sub/dir")
    assert box.exec.command("pwd").stdout.strip() == "/workspace/home/sub/dir"
    box.cd("/tmp")
    assert box.exec.command("pwd").stdout.strip() == "/tmp"
    with pytest.raises(BoxError, match="No such file"):
        box.cd("/nowhere")


def test_exec_stream_output_then_exit(fake: Fake):
    box = fake.create()
    chunks = list(box.exec.stream("echo one; sleep 0.05; echo two >&2; exit 3"))
    text = "".join(c.data for c in chunks if c.type == "output")
    assert text == "one\ntwo\n"
    assert chunks[-1].type == "exit" and chunks[-1].exit_code == 3
    run = box.exec.stream("printf done")
    assert "".join(c.data for c in run if c.type == "output") == "done"
    assert run.exit_code == 0 and run.status == "completed"


def test_exec_stream_reports_a_box_deleted_mid_command(fake: Fake):
    box = fake.create()
    stream = box.exec.stream("echo started; sleep 30")
    seen: list = []
    with pytest.raises(BoxError, match="deleted"):
        for chunk in stream:
            seen.append(chunk)
            if chunk.type == "output":
                fake.world.delete(fake.world.get(box.id))  # type: ignore[arg-type]
    assert seen and seen[0].data == "started\n"


def test_exec_on_a_paused_box_is_refused_or_resumes(fake: Fake):
    box = fake.create()
    box.pause()
    with pytest.raises(BoxError) as info:
        box.exec.command("true")
    assert info.value.status_code == 409 and "paused" in info.value.message
    fake.settings.paused_exec = "resume"
    assert box.exec.command("echo back").stdout == "back\n"
    assert box.get_status()["status"] == "idle"


# ------------------------------------------------------------------ files
def test_files_write_read_list_stat(fake: Fake):
    box = fake.create()
    box.files.write(path="notes/a.txt", content="héllo\n")
    assert box.files.read("notes/a.txt") == "héllo\n"
    assert box.files.read("/workspace/home/notes/a.txt", offset=1, length=4) == "éll"
    assert (
        box.files.read("/workspace/home/notes/a.txt", encoding="base64")
        == base64.b64encode("héllo\n".encode()).decode()
    )
    box.files.write(path="bin.dat", content=base64.b64encode(bytes(range(256))).decode(), encoding="base64")
    raw = box.files.read("bin.dat", encoding="base64", offset=250, length=10)
    assert base64.b64decode(raw) == bytes(range(250, 256))
    entries = {e.name: e for e in box.files.list()}
    assert set(entries) == {"notes", "bin.dat"}
    assert entries["notes"].is_dir and entries["bin.dat"].size == 256
    assert entries["bin.dat"].path == "/workspace/home/bin.dat"
    assert [e.path for e in box.files.list("notes")] == ["/workspace/home/notes/a.txt"]
    st = box.files.stat("bin.dat")
    assert (st.type, st.size) == ("file", 256) and st.inode > 0
    assert box.files.stat("notes").type == "directory"
    before = st.version
    box.files.write(path="bin.dat", content="x")
    assert box.files.stat("bin.dat").version != before, "version is a freshness token"


def test_files_read_length_cap_and_errors(fake: Fake):
    box = fake.create()
    box.files.write(path="f", content="data")
    assert box.files.read("f", length=8 * MIB) == "data"
    with pytest.raises(BoxError) as info:
        box.files.read("f", length=8 * MIB + 1)
    assert info.value.status_code == 400 and "8 MiB" in info.value.message
    with pytest.raises(BoxError) as info:
        box.files.read("missing")
    assert info.value.status_code == 404
    with pytest.raises(BoxError) as info:
        box.files.read("/etc/passwd")
    assert info.value.status_code == 403 and "permission_denied" in info.value.message


def test_files_stat_symlinks(fake: Fake):
    box = fake.create()
    box.exec.command("echo x > target && ln -s target link && ln -s /etc/passwd outside")
    assert box.files.stat("link").type == "symlink"
    assert box.files.stat("link", follow=True).type == "file"
    with pytest.raises(BoxError) as info:
        box.files.read("outside")
    assert info.value.status_code == 403, "a symlink must not lead the files API out of the workspace"


def test_files_mkdir_rename_remove(fake: Fake):
    box = fake.create()
    with pytest.raises(BoxError) as info:
        box.files.mkdir("a/b/c")
    assert info.value.status_code == 404
    box.files.mkdir("a/b/c", parents=True)
    box.files.mkdir("a/b/c", parents=True)  # like mkdir -p
    with pytest.raises(BoxError) as info:
        box.files.mkdir("a/b/c")
    assert info.value.status_code == 409
    box.files.write(path="a/b/c/f.txt", content="1")
    box.files.rename("a/b/c/f.txt", "a/g.txt")
    assert box.files.read("a/g.txt") == "1"
    with pytest.raises(BoxError):
        box.files.rename("a/none", "a/x")
    with pytest.raises(BoxError) as info:
        box.files.remove("a")
    assert info.value.status_code == 400 and "recursive" in info.value.message
    box.files.remove("a/g.txt")
    box.files.remove("a", recursive=True)
    assert box.files.list() == []


def test_files_upload_and_download(fake: Fake, tmp_path, monkeypatch):
    box = fake.create()
    (tmp_path / "one.bin").write_bytes(bytes(range(256)) * 10)
    (tmp_path / "two.txt").write_text("two\r\n--not-a-boundary\r\n")
    box.files.upload(
        [
            {"path": str(tmp_path / "one.bin"), "destination": "up/one.bin"},
            {"path": str(tmp_path / "two.txt"), "destination": "/workspace/home/up/two.txt"},
        ]
    )
    host = fake.world.get(box.id).workspace_dir  # type: ignore[union-attr]
    assert (host / "up/one.bin").read_bytes() == bytes(range(256)) * 10
    assert (host / "up/two.txt").read_bytes() == b"two\r\n--not-a-boundary\r\n"
    monkeypatch.chdir(tmp_path)
    box.files.download(folder="up")
    assert (tmp_path / "up" / "one.bin").read_bytes() == bytes(range(256)) * 10
    assert (tmp_path / "up" / "two.txt").read_bytes() == b"two\r\n--not-a-boundary\r\n"
    with pytest.raises(BoxError) as info:
        box.files.upload([{"path": str(tmp_path / "one.bin"), "destination": "/home/boxuser/x"}])
    assert info.value.status_code == 403


def test_files_jail_can_be_opened(fake: Fake):
    fake.settings.files_jail = False
    box = fake.create()
    box.files.write(path="/home/boxuser/.hermes/x", content="home")
    assert box.exec.command("cat ~/.hermes/x").stdout == "home"
    with pytest.raises(BoxError) as info:
        box.files.read("/etc/passwd")
    assert info.value.status_code == 403


def test_files_written_by_commands_are_visible_and_back(fake: Fake):
    box = fake.create()
    box.exec.command("printf from-shell > shell.txt")
    assert box.files.read("shell.txt") == "from-shell"
    box.files.write(path="api.txt", content="from-api")
    assert box.exec.command("cat /workspace/home/api.txt").stdout == "from-api"


# ------------------------------------------------------------------ labels
def test_labels(fake: Fake):
    box = fake.create(labels=["hermes"])
    assert box.labels.add("laptop") == ["hermes", "laptop"]
    with pytest.raises(BoxError) as info:
        box.labels.add("laptop")
    assert (info.value.status_code, info.value.message) == (409, "Label already added")
    with pytest.raises(BoxError) as info:
        box.labels.add("bad label")
    assert info.value.status_code == 400
    assert box.labels.list() == ["hermes", "laptop"]
    assert box.labels.remove("hermes") == ["laptop"]
    with pytest.raises(BoxError) as info:
        box.labels.remove("a b/c")
    assert (info.value.status_code, info.value.message) == (404, "Label not found")
    assert [d.id for d in Box.list(label="laptop", **fake.kw)] == [box.id]


# ------------------------------------------------------------------ auth and unknown endpoints
def test_wrong_or_missing_key_is_401(fake: Fake):
    box = fake.create()
    bad = {**fake.kw, "api_key": "ubx_wrong"}
    for call in (lambda: Box.get(box.id, **bad), lambda: Box.list(**bad), lambda: Box.create(**bad)):
        with pytest.raises(BoxError) as info:
            call()
        assert info.value.status_code == 401 and info.value.message == "invalid API key"
    missing = httpx.get(f"{fake.url}/v2/box/{box.id}")
    assert missing.status_code == 401 and missing.json() == {"error": "missing X-Box-Api-Key header"}
    wrong = Box.get(box.id, **fake.kw)
    wrong._headers["X-Box-Api-Key"] = "ubx_wrong"  # the session upgrade checks the key too
    with pytest.raises(BoxError, match="401"):
        wrong.exec.session(cmd="true")


def test_unknown_endpoints_say_so(fake: Fake):
    box = fake.create()
    response = httpx.post(f"{fake.url}/v2/box/{box.id}/run", headers=fake.headers, json={})
    assert response.status_code == 404 and "not served by the Upstash Box fake" in response.json()["error"]
    assert httpx.post(f"{fake.url}/v2/box/{box.id}/run", json={}).status_code == 401

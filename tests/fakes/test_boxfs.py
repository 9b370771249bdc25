"""fakes.boxfs against a hostile box: links out, link loops, FIFOs, hard links, NUL bytes, races, ownership."""

from __future__ import annotations

import ctypes
import os
import stat
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from fakes import boxfs
from fakes.boxfs import Area, BoxFS, FsError
from fakes.world_view import BoxWorldView

ROOT = os.geteuid() == 0
OWNER = (4242, 4343)


@pytest.fixture
def box(tmp_path: Path) -> dict[str, Path]:
    dirs = {name: tmp_path / "box" / name for name in ("home", "workspace", "tmp")}
    for d in dirs.values():
        d.mkdir(parents=True)
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret").write_text("host secret\n")
    dirs["host"] = tmp_path / "host"
    return dirs


def fs_of(box: dict[str, Path], uid: int | None = None, gid: int | None = None) -> BoxFS:
    # The box's tmp is at /scratch here: the test's host directories live under the real /tmp.
    return BoxFS(
        [Area("/home/u", box["home"]), Area("/work", box["workspace"]), Area("/scratch", box["tmp"])], uid, gid
    )


def kind(call) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(FsError) as info:
        call()
    return info.value.kind


def test_reads_writes_lists_stats_and_removes_inside_the_areas(box: dict[str, Path]) -> None:
    fs = fs_of(box)
    assert fs.write("/work/a/b/f.txt", [b"one ", b"two"]) == 7
    assert (box["workspace"] / "a/b/f.txt").read_bytes() == b"one two"
    assert fs.read("/work/a/b/f.txt", 4, 3) == b"two"
    assert [(e.name, e.is_dir) for e in fs.list("/work/a")] == [("b", True)]
    assert fs.stat("/work/a/b/f.txt").st_size == 7 and fs.is_dir("/work/a") and not fs.is_dir("/work/nope")
    fs.mkdir("/home/u/d")
    assert kind(lambda: fs.mkdir("/home/u/d")) == "exists"
    assert kind(lambda: fs.mkdir("/home/u/x/y")) == "not_found"
    fs.makedirs("/home/u/x/y")
    fs.rename("/work/a/b/f.txt", "/scratch/g.txt")
    assert (box["tmp"] / "g.txt").read_bytes() == b"one two"
    assert kind(lambda: fs.remove("/work/a")) == "is_a_directory"
    fs.remove("/work/a", recursive=True)
    assert list(box["workspace"].iterdir()) == []
    assert kind(lambda: fs.remove("/work")) == "permission", "an area itself cannot be removed"
    assert kind(lambda: fs.read("/work/missing")) == "not_found"
    assert kind(lambda: fs.read("/work")) == "is_a_directory"
    fs.write("/work/file", b"x")
    assert kind(lambda: fs.write("/work/file/under", b"x")) == "not_a_directory"
    assert kind(lambda: fs.write("/work", b"x")) == "is_a_directory"


def test_a_write_replaces_the_file_and_keeps_its_mode(box: dict[str, Path]) -> None:
    fs = fs_of(box)
    target = box["workspace"] / "run.sh"
    target.write_text("old")
    target.chmod(0o750)
    fs.write("/work/run.sh", b"new")
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == 0o750
    assert [p.name for p in box["workspace"].iterdir()] == ["run.sh"], "no temporary file is left"


@pytest.mark.parametrize("target", ["{host}", "{host}/secret", "../../host", "/etc", "/"])
def test_links_out_of_the_areas_are_refused_everywhere(box: dict[str, Path], target: str) -> None:
    fs = fs_of(box)
    (box["workspace"] / "out").symlink_to(target.format(host=box["host"]))
    for call in (
        lambda: fs.read("/work/out/secret"),
        lambda: fs.read("/work/out"),
        lambda: fs.write("/work/out/new", b"x"),
        lambda: fs.makedirs("/work/out/d"),
        lambda: fs.list("/work/out"),
        lambda: fs.stat("/work/out", follow=True),
        lambda: fs.write("/work/out", b"x"),
    ):
        assert kind(call) in ("outside", "not_a_directory"), call
    assert sorted(p.name for p in box["host"].iterdir()) == ["secret"]
    assert (box["host"] / "secret").read_text() == "host secret\n"
    assert stat.S_ISLNK(fs.stat("/work/out").st_mode), "without follow the link itself is seen"
    fs.remove("/work/out")
    assert (box["host"] / "secret").exists(), "removing a link never removes what it points to"


def test_links_inside_are_followed_as_the_box_sees_them(box: dict[str, Path]) -> None:
    fs = fs_of(box)
    (box["workspace"] / "real").mkdir()
    (box["workspace"] / "abs").symlink_to("/work/real")  # an absolute target is a box path
    (box["workspace"] / "rel").symlink_to("real")
    (box["workspace"] / "to-tmp").symlink_to("/scratch")  # another area of the same box
    (box["workspace"] / "host-path").symlink_to(box["workspace"] / "real")  # a host path is not a box path
    fs.write("/work/abs/a", b"1")
    fs.write("/work/rel/b", b"2")
    fs.write("/work/to-tmp/c", b"3")
    assert sorted(p.name for p in (box["workspace"] / "real").iterdir()) == ["a", "b"]
    assert (box["tmp"] / "c").read_bytes() == b"3"
    assert kind(lambda: fs.read("/work/host-path/a")) == "outside"
    (box["workspace"] / "file-link").symlink_to("real/a")
    fs.write("/work/file-link", b"through the leaf link")
    assert (box["workspace"] / "file-link").is_symlink(), "a write follows a link at the leaf, inside the box"
    assert (box["workspace"] / "real" / "a").read_bytes() == b"through the leaf link"


def test_a_host_path_that_looks_like_a_box_path_stays_in_the_box(box: dict[str, Path]) -> None:
    fs = BoxFS([Area("/tmp", box["tmp"])])  # the box's own /tmp, as the fakes have it
    (box["tmp"] / "link").symlink_to(box["host"])  # a host directory under the host's /tmp
    assert str(box["host"]).startswith("/tmp/")
    assert kind(lambda: fs.read("/tmp/link/secret")) == "not_found", "the box's /tmp, not the host's"
    fs.write("/tmp/link/new", b"x")
    assert sorted(p.name for p in box["host"].iterdir()) == ["secret"]
    assert (box["tmp"] / box["host"].relative_to("/tmp") / "new").read_bytes() == b"x"


def test_link_loops_end_as_loop(box: dict[str, Path]) -> None:
    fs = fs_of(box)
    (box["workspace"] / "a").symlink_to("b")
    (box["workspace"] / "b").symlink_to("a")
    assert kind(lambda: fs.read("/work/a")) == "loop"
    assert kind(lambda: fs.write("/work/a/x", b"")) == "loop"


@pytest.mark.parametrize(
    "path, detail",
    [("/work/a\0b", "NUL"), ("work/a", "absolute"), ("/work/" + "x" * 5000, "longer"), ("/etc/passwd", "")],
)
def test_bad_paths_are_refused_before_any_disk_access(box: dict[str, Path], path: str, detail: str) -> None:
    fs = fs_of(box)
    with pytest.raises(FsError) as info:
        fs.write(path, b"x")
    assert info.value.kind == ("outside" if not detail else "invalid") and detail in str(info.value)


def test_a_fifo_is_not_a_file_and_never_blocks(box: dict[str, Path]) -> None:
    fs = fs_of(box)
    os.mkfifo(box["workspace"] / "pipe")
    started = time.monotonic()
    assert kind(lambda: fs.read("/work/pipe")) == "not_a_file"
    assert time.monotonic() - started < 5
    view = BoxWorldView.__new__(BoxWorldView)
    view.nonce_places = lambda: [("box-1", box["workspace"])]  # type: ignore[method-assign]
    assert view.locate("pipe", "x") is None, "a FIFO at a nonce path must not hang the kit"


def test_a_write_never_goes_through_a_hard_link(box: dict[str, Path]) -> None:
    fs = fs_of(box)
    os.link(box["host"] / "secret", box["workspace"] / "linked")
    fs.write("/work/linked", b"overwritten")
    assert (box["host"] / "secret").read_text() == "host secret\n"
    assert (box["workspace"] / "linked").read_bytes() == b"overwritten"


def test_world_view_locate_stays_in_the_box(box: dict[str, Path]) -> None:
    (box["home"] / "nonce").symlink_to(box["host"] / "secret")
    (box["home"] / "real").write_text("n-123\n")
    view = BoxWorldView.__new__(BoxWorldView)
    view.nonce_places = lambda: [("box-1", box["home"])]  # type: ignore[method-assign]
    assert view.locate("nonce", "host secret") is None, "a link out of the box is never read"
    assert view.locate("real", "n-123") == "box-1"


@pytest.mark.skipif(not ROOT, reason="giving files to another user needs root")
def test_what_is_created_belongs_to_the_box_owner(box: dict[str, Path]) -> None:
    fs = fs_of(box, *OWNER)
    fs.write("/work/new/dirs/f", b"x")
    fs.mkdir("/home/u/d")
    for path in (
        box["workspace"] / "new",
        box["workspace"] / "new/dirs",
        box["workspace"] / "new/dirs/f",
        box["home"] / "d",
    ):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == OWNER, path


def test_copy_tree_keeps_links_skips_specials_and_gives_the_copy_to_its_owner(
    box: dict[str, Path], tmp_path: Path
) -> None:
    src = box["workspace"]
    (src / "d").mkdir()
    (src / "d" / "f").write_bytes(b"data")
    (src / "d" / "f").chmod(0o600)
    (src / "out").symlink_to(box["host"])
    os.mkfifo(src / "pipe")
    dest = tmp_path / "copy"
    uid, gid = OWNER if ROOT else (os.geteuid(), os.getegid())
    boxfs.copy_tree(src, dest, uid, gid)
    assert sorted(p.name for p in dest.iterdir()) == ["d", "out"]
    assert (dest / "d" / "f").read_bytes() == b"data" and stat.S_IMODE((dest / "d" / "f").stat().st_mode) == 0o600
    assert (dest / "out").is_symlink() and os.readlink(dest / "out") == str(box["host"]), (
        "a link is copied as a link, never followed"
    )
    for path in (dest / "d", dest / "d" / "f"):
        assert (path.stat().st_uid, path.stat().st_gid) == (uid, gid)
    assert (os.lstat(dest / "out").st_uid, os.lstat(dest / "out").st_gid) == (uid, gid)


_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(-100, bytes(a), -100, bytes(b), 2) != 0:  # RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2")


def test_a_directory_swapped_for_a_link_under_concurrent_writes_never_leads_out(box: dict[str, Path]) -> None:
    fs = fs_of(box)
    target, link = box["workspace"] / "up", box["workspace"] / "up.link"
    target.mkdir()
    link.symlink_to(box["host"])
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            _exchange(target, link)
            swaps += 1

    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def writer(worker: int) -> None:
        for n in range(300):
            try:
                fs.write(f"/work/up/sub/f{worker}-{n}", b"x")
                outcome = "written"
            except FsError as exc:
                outcome = exc.kind
            with lock:
                outcomes[outcome] += 1

    swap = threading.Thread(target=swapper)
    swap.start()
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(60)
    stop.set()
    swap.join(10)
    assert swaps > 100, "the race never ran"
    assert sorted(p.name for p in box["host"].iterdir()) == ["secret"], "a write landed outside the box"
    assert set(outcomes) <= {"written", "outside"}, outcomes
    assert outcomes["written"] > 0

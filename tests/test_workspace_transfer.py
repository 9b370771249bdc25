"""A workspace moves between backends through the contract's own operations, with its tree intact.

Real fakes, real backends, real gpg: a tree with text and binary files, an executable, modes,
symbolic links, empty and nested directories, awkward names and a FIFO is made in an upstash_box
sandbox through execute(), saved with ``conformance.workspace.save`` into the Box Lite archive
format, and loaded into a deepinfra sandbox and into other backends; each side's tree is listed
and hashed inside its own sandbox (``workspace.tree_of``) and compared by digest.  Refusals (wrong
passphrase, damaged or unsafe archives) happen before any sandbox is asked anything.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import archives
from archives.openpgp import encrypting
from conformance import backends
from conformance import workspace as ws
from conformance import workspace_tree as wt
from conformance.run import KitRun, RunOptions
from conformance.workspace_archive import ArchiveRefused
from conformance.workspace_shell import MIN_CHUNK, SandboxToolsMissing

ROOT = Path(__file__).resolve().parents[1]
PASSPHRASE = archives.Passphrase("correct horse battery staple")
BLOB = bytes(range(256)) * 64 + os.urandom(1536 * 1024)  # every byte value, then 1.5 MiB that gzip cannot shrink

# Made inside the source sandbox, through execute(); the blob arrives on stdin as base64.
POPULATE = r"""
set -e
mkdir -p notes bin 'a/b/c/d' empty private .config
printf 'präsent ✓\nline two\n' > notes/todo.md
base64 -d > bin/blob.bin
printf '#!/bin/sh\necho ran\n' > bin/run.sh && chmod 755 bin/run.sh
printf 'secret\n' > private/key && chmod 600 private/key && chmod 700 private
printf 'ro\n' > readonly.txt && chmod 444 readonly.txt
printf 'deep\n' > a/b/c/deep.txt
printf 'k=v\n' > .config/app.ini
printf 'spaces\n' > 'with space.txt'
printf 'newline\n' > "$(printf 'line\nbreak')"
printf 'latin-1 name\n' > "$(printf 'caf\351')"
ln -s notes/todo.md latest
ln -s notes notes-link
ln -s missing/file dangling
ln notes/todo.md notes/hard
mkfifo pipe
"""


def _restore_environ(before: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(before)


@pytest.fixture
def clean_environ() -> Iterator[None]:
    """KitRun exports its fake's variables and a private HERMES_HOME: put everything back after."""
    before = dict(os.environ)
    try:
        yield
    finally:
        _restore_environ(before)


@pytest.fixture
def kit_root() -> Iterator[Path]:
    """A short run directory: a box_lite box's control socket lies under it, and a socket path has
    at most 107 bytes (pytest's tmp_path is too deep for that)."""
    root = Path(tempfile.mkdtemp(prefix="kit-ws-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _kit(backend: str, root: Path) -> KitRun:
    known = backends.KNOWN_BACKENDS.get(backend)
    if known is not None and known.missing_extra():
        pytest.skip(known.missing_extra() or "")
    return KitRun.start(RunOptions(backend=backend, host="builtin"), root)


def _create(run: KitRun, task: str) -> Any:
    return run.create(task, persistent=True)


class Counting:
    """An environment that counts what is asked of it (a refused archive must ask nothing)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.executes = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.executes += 1
        return self.env.execute(*args, **kwargs)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The source: an upstash_box sandbox (its fake) populated through execute(), saved to an archive."""
    root = tmp_path_factory.mktemp("source")
    before = dict(os.environ)
    run = _kit("upstash_box", root / "kit")
    try:
        env = _create(run, "kit-ws-source")
        made = env.execute(POPULATE, timeout=120, stdin_data=base64.encodebytes(BLOB).decode())
        assert made["returncode"] == 0, made
        source_tree = ws.tree_of(env)
        out = root / "workspace.tar.gz.gpg"
        result = ws.save(env, out, PASSPHRASE, name="kit-ws-source")
    finally:
        run.close()
        _restore_environ(before)
    return {"archive": out, "tree": source_tree, "result": result}


# ------------------------------------------------------------------ the source side
def test_save_archives_the_whole_tree_and_verifies_it_against_the_sandbox(saved):
    tree, result = saved["tree"], saved["result"]
    assert result.verified and result.tree.digest() == tree.digest()
    entries = tree.entries
    blob = entries["bin/blob.bin"]
    assert blob.kind == wt.FILE and blob.size == len(BLOB)
    assert blob.content == hashlib.sha256(BLOB).hexdigest()
    assert entries["bin/run.sh"].mode == 0o755 and entries["readonly.txt"].mode == 0o444
    assert entries["private"].mode == 0o700 and entries["private/key"].mode == 0o600
    assert entries["latest"] == wt.Entry("latest", wt.LINK, 0, "notes/todo.md")
    assert entries["notes-link"].kind == wt.LINK and entries["dangling"].content == "missing/file"
    assert entries["empty"].kind == wt.DIR and entries["a/b/c/d"].kind == wt.DIR
    assert entries["notes/hard"].content == entries["notes/todo.md"].content  # a hard link saved as a copy
    for name in ("with space.txt", "line\nbreak", "caf\udce9", ".config/app.ini"):
        assert entries[name].kind == wt.FILE, name
    # Hermes's own synced files (credentials among them) are not the workspace; a FIFO cannot be restored.
    assert not [p for p in entries if p.startswith(".hermes")]
    assert "pipe" not in entries and result.skipped == ["pipe"]
    # Verified bytes moved through execute(): the blob could not shrink, so at least it went across.
    assert result.figures.wire_bytes > len(BLOB) // 2 and result.figures.calls >= 4


def test_the_archive_is_the_box_lite_format_and_gpg_opens_it(saved, tmp_path):
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    plain = subprocess.run(
        [
            "gpg",
            "--homedir",
            str(home),
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase-fd",
            "0",
            "--decrypt",
            str(saved["archive"]),
        ],
        input=PASSPHRASE.reveal() + b"\n",
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(plain), mode="r:gz") as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert names[0] == "manifest.json" and manifest["kind"] == "workspace" and manifest["format"] == 1
    assert "data/bin/run.sh" in names and "data/latest" in names and not any(".hermes" in n for n in names)


# ------------------------------------------------------------------ refusals, before any sandbox
def _tampered(archive: Path, tmp_path: Path) -> Path:
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad = tmp_path / "tampered.tar.gz.gpg"
    bad.write_bytes(bytes(data))
    return bad


def _encrypted_tar(tmp_path: Path, members: list[tuple[str, bytes]]) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        manifest = json.dumps({"format": 1, "kind": "workspace", "name": "evil", "created_at": "2025-01-01T00:00:00Z"})
        for name, body in [("manifest.json", manifest.encode()), *members]:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    out = tmp_path / "unsafe.tar.gz.gpg"
    with open(out, "wb") as f, encrypting(f.fileno(), PASSPHRASE) as pipe:
        pipe.write(raw.getvalue())
    return out


@pytest.mark.parametrize("problem", ["wrong passphrase", "tampered", "truncated", "parent reference"])
def test_a_bad_archive_is_refused_before_any_sandbox_is_made_or_asked(saved, tmp_path, problem):
    archive, passphrase = saved["archive"], PASSPHRASE
    if problem == "wrong passphrase":
        passphrase = archives.Passphrase("not the passphrase")
    elif problem == "tampered":
        archive = _tampered(archive, tmp_path)
    elif problem == "truncated":
        archive = tmp_path / "short.tar.gz.gpg"
        archive.write_bytes(saved["archive"].read_bytes()[: saved["archive"].stat().st_size // 2])
    else:
        archive = _encrypted_tar(tmp_path, [("data/ok.txt", b"ok"), ("data/../escape", b"out")])
    made: list[str] = []
    with pytest.raises(ArchiveRefused) as refused:
        ws.load(archive, passphrase, lambda: made.append("env") or pytest.fail("a sandbox was made"))
    assert not made
    words = {"wrong passphrase": "passphrase", "tampered": "archive", "truncated": "archive", "parent reference": ".."}
    assert words[problem] in refused.value.what, refused.value.what
    assert "correct horse" not in str(refused.value)


# ------------------------------------------------------------------ the destinations
def test_load_into_a_deepinfra_sandbox_keeps_bytes_modes_links_and_empty_dirs(saved, tmp_path, clean_environ):
    run = _kit("deepinfra", tmp_path / "kit")
    try:
        env = Counting(_create(run, "kit-ws-deepinfra"))
        before = ws.tree_of(env.env)
        for bad, passphrase in (
            (_tampered(saved["archive"], tmp_path), PASSPHRASE),
            (saved["archive"], archives.Passphrase("wrong")),
        ):
            with pytest.raises(ArchiveRefused):
                ws.load(bad, passphrase, env)
        assert env.executes == 0  # refused before the destination sandbox was asked anything
        assert ws.tree_of(env.env).digest() == before.digest()
        result = ws.load(saved["archive"], PASSPHRASE, env)
        assert result.verified and not result.replaced
        after = ws.tree_of(env.env)
        assert after.digest() == saved["tree"].digest(), wt.differences(saved["tree"], after)
        shown = env.env.execute("./bin/run.sh && readlink latest && cat notes-link/todo.md && test -d empty")
        assert shown["returncode"] == 0 and "ran\nnotes/todo.md\npräsent ✓" in shown["output"]
    finally:
        run.close()


def _other_destinations() -> list[str]:
    """box_lite once it is registered, else two more backends of different kinds."""
    if "box_lite" in backends.KNOWN_BACKENDS:
        return ["box_lite", "cloudflare_sandbox"]
    return ["tempdir_box", "cloudflare_sandbox"]


@pytest.mark.parametrize("backend", _other_destinations())
def test_load_into_other_backends_gives_the_same_tree(saved, kit_root, clean_environ, backend):
    run = _kit(backend, kit_root / "kit")
    try:
        env = _create(run, f"kit-ws-{backend}")
        result = ws.load(saved["archive"], PASSPHRASE, env, path="restored/here")
        after = ws.tree_of(env, "restored/here")
        assert result.verified and after.digest() == saved["tree"].digest(), wt.differences(saved["tree"], after)
    finally:
        run.close()


# ------------------------------------------------------------------ destination and sandbox problems
@pytest.fixture
def tempdir_env(tmp_path, clean_environ) -> Iterator[Any]:
    run = _kit("tempdir_box", tmp_path / "kit")
    try:
        yield _create(run, "kit-ws-local")
    finally:
        run.close()


def test_a_non_empty_destination_needs_force_which_replaces_it(saved, tempdir_env):
    env = tempdir_env
    env.execute("mkdir -p ws && echo old > ws/old.txt && mkdir -p ws/.hermes && echo keep > ws/.hermes/x")
    with pytest.raises(ws.DestinationNotEmpty) as refused:
        ws.load(saved["archive"], PASSPHRASE, env, path="ws")
    assert "--force" in refused.value.fix
    assert env.execute("cat ws/old.txt")["output"].strip() == "old"
    result = ws.load(saved["archive"], PASSPHRASE, env, path="ws", force=True)
    assert result.replaced and ws.tree_of(env, "ws").digest() == saved["tree"].digest()
    listing = env.execute("test ! -e ws/old.txt && cat ws/.hermes/x")
    assert listing["returncode"] == 0 and listing["output"].strip() == "keep"  # Hermes's own entries stay


def test_a_sandbox_without_tar_or_base64_is_refused_by_name(saved, tempdir_env, tmp_path):
    env = tempdir_env
    made = env.execute(  # every command of this machine but tar and base64
        "mkdir -p ../few && ln -s /usr/bin/* ../few/ && for p in /bin/*; do [ -e ../few/${p##*/} ] || "
        'ln -s "$p" ../few/; done; rm -f ../few/tar ../few/base64; (cd ../few && pwd -P)'
    )
    few = made["output"].strip().splitlines()[-1]
    env.execute(f"export PATH={few}")
    with pytest.raises(SandboxToolsMissing) as missing:
        ws.save(env, tmp_path / "never.tar.gz.gpg", PASSPHRASE)
    assert "tar" in missing.value.what and "base64" in missing.value.what
    assert not (tmp_path / "never.tar.gz.gpg").exists()
    with pytest.raises(SandboxToolsMissing):
        ws.load(saved["archive"], PASSPHRASE, env, path="elsewhere")


def test_a_link_the_archive_would_refuse_is_named_before_anything_is_fetched(tempdir_env, tmp_path):
    env = Counting(tempdir_env)
    env.execute(
        "mkdir -p proj/venv/bin && head -c 100000 /dev/urandom > proj/big "
        "&& ln -s /usr/bin/python3 proj/venv/bin/python"
    )
    out = tmp_path / "never.tar.gz.gpg"
    calls = env.executes
    with pytest.raises(ArchiveRefused) as refused:
        ws.save(env, out, PASSPHRASE, path="proj")
    assert "data/venv/bin/python" in refused.value.what and "/usr/bin/python3" in refused.value.what
    assert not out.exists() and env.executes - calls <= 4  # probe, list, read the listing, clean up: no packing
    with pytest.raises(ws.WorkspaceError, match="has no directory"):
        ws.save(env, out, PASSPHRASE, path="no/such/dir")


class Interrupting:
    """An environment where Ctrl-C arrives during the ``at``-th execute() whose command contains ``word``."""

    def __init__(self, env: Any, word: str, at: int = 1) -> None:
        self.env, self.word, self.left = env, word, at

    def execute(self, command: str, **kwargs: Any) -> Any:
        if self.word in command:
            self.left -= 1
            if self.left == 0:
                raise KeyboardInterrupt
        return self.env.execute(command, **kwargs)


def test_an_interrupted_transfer_leaves_no_archive_no_partial_workspace_and_no_temp_files(saved, tempdir_env, tmp_path):
    env = tempdir_env
    temp_entries = 'ls -A "${TMPDIR:-/tmp}" | wc -l'
    before = env.execute(temp_entries)["output"].strip()
    with pytest.raises(KeyboardInterrupt):  # during the second chunk sent into the sandbox
        ws.load(saved["archive"], PASSPHRASE, Interrupting(env, "base64 -d", at=2), path="restored")
    assert env.execute("test -e restored")["returncode"] != 0  # nothing unpacked
    env.execute("mkdir -p src && printf 'x%.0s' $(seq 1 3000) > src/f && head -c 3000000 /dev/urandom > src/g")
    out = tmp_path / "out" / "ws.tar.gz.gpg"
    out.parent.mkdir()
    with pytest.raises(KeyboardInterrupt):  # while the packed workspace is read out of the sandbox
        ws.save(Interrupting(env, "tail -c +", at=2), out, PASSPHRASE, path="src")
    assert list(out.parent.iterdir()) == []  # neither the archive nor a partial file
    assert env.execute(temp_entries)["output"].strip() == before


class Capped:
    """A backend whose output keeps only the first 40 % and the last 60 % of ``cap`` characters, as
    Hermes's bounded capture does, and whose service refuses a command with more than ``stdin_cap``
    characters of stdin."""

    def __init__(self, env: Any, cap: int, stdin_cap: int) -> None:
        self.env, self.cap, self.stdin_cap = env, cap, stdin_cap
        self.executes = 0

    def execute(self, command: str, **kwargs: Any) -> dict[str, Any]:
        self.executes += 1
        stdin = kwargs.get("stdin_data")
        if stdin is not None and len(stdin) > self.stdin_cap:
            raise RuntimeError("413 Request Entity Too Large")  # as a service refuses an oversized request
        result = dict(self.env.execute(command, **kwargs))
        text = result["output"]
        if len(text) > self.cap:
            head = int(self.cap * 0.4)
            result["output"] = text[:head] + "\n... [OUTPUT TRUNCATED] ...\n" + text[-(self.cap - head) :]
            result["output_total_chars"] = len(text)
        return result


def test_a_backend_output_and_input_cap_slows_the_transfer_but_never_shortens_it(tempdir_env, tmp_path):
    small = bytes(range(256)) * 4 + os.urandom(300 * 1024)
    made = tempdir_env.execute(
        f"mkdir -p src && cd src && {{ {POPULATE} }}", stdin_data=base64.encodebytes(small).decode(), timeout=120
    )
    assert made["returncode"] == 0, made
    tempdir_env.execute("cd ..")
    capped = Capped(tempdir_env, cap=100_000, stdin_cap=200_000)
    out = tmp_path / "capped.tar.gz.gpg"
    saved = ws.save(capped, out, PASSPHRASE, path="src")
    assert saved.verified and saved.figures.retries >= 1
    loaded = ws.load(out, PASSPHRASE, capped, path="dst")
    assert loaded.verified and loaded.figures.retries >= 1
    assert ws.tree_of(tempdir_env, "dst").digest() == ws.tree_of(tempdir_env, "src").digest() == saved.tree.digest()
    tiny = Capped(tempdir_env, cap=MIN_CHUNK, stdin_cap=10**9)
    with pytest.raises(ws.TransferFailed, match="even 4096 bytes per command"):
        ws.save(tiny, tmp_path / "never.tar.gz.gpg", PASSPHRASE, path="src")
    assert not (tmp_path / "never.tar.gz.gpg").exists()


# ------------------------------------------------------------------ the command line
CLI = [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "conformance.cli"]


def _cli(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HERMES_", "BOX_"))}
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=ROOT, env={**base, **(env or {})}
    )


def _one_error(done: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) <= 2, done.stderr
    assert lines[0].startswith("error: ") and " — " in lines[0] and "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return lines[0]


def test_cli_refuses_a_missing_archive_and_a_wrong_passphrase_without_starting_a_backend(saved, tmp_path):
    missing = _cli("workspace", "load", tmp_path / "nope.gpg", "--backend", "upstash_box", "--task", "t")
    _one_error(missing, "no such archive")
    wrong = _cli(
        "workspace",
        "load",
        saved["archive"],
        "--backend",
        "upstash_box",
        "--task",
        "t",
        env={"BOX_PASSPHRASE": "definitely wrong"},
    )
    line = _one_error(wrong, "passphrase")
    assert "definitely wrong" not in wrong.stderr + wrong.stdout and "fake" not in wrong.stderr, line
    existing = _cli(
        "workspace",
        "save",
        "--out",
        saved["archive"],
        "--backend",
        "upstash_box",
        "--task",
        "t",
        env={"BOX_PASSPHRASE": "x"},
    )
    _one_error(existing, "already exists")


def _serve(vendor: str, root: Path) -> tuple[subprocess.Popen[str], str]:
    """`hermes-backend-kit fake serve VENDOR`: its sandboxes outlive each command; its control address."""
    proc = subprocess.Popen(
        [*CLI, "fake", "serve", vendor, "--root", str(root)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or "fake is serving" not in lines[-1]:
        line = proc.stdout.readline()
        if not line:
            proc.wait(10)
            raise AssertionError(f"fake serve ended early: {lines}")
        lines.append(line.rstrip("\n"))
    control = next(line.split("=", 1)[1] for line in lines if line.startswith("# control: "))
    return proc, control.strip("'")


def test_cli_load_then_save_through_a_served_fake_gives_back_the_same_tree(tmp_path):
    tree = tmp_path / "tree"
    (tree / "src" / "empty").mkdir(parents=True)
    (tree / "src" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tree / "src" / "run.sh").chmod(0o755)
    (tree / "data.bin").write_bytes(bytes(range(256)) * 40)
    (tree / "link").symlink_to("src/run.sh")
    archive = tmp_path / "made-here.tar.gz.gpg"
    archives.write_tree(tree, archive, kind="workspace", name="made-here", passphrase=PASSPHRASE)
    digest = ws.archive_io.read_tree(archive, PASSPHRASE).digest()
    proc, control = _serve("cloudflare", tmp_path / "fake")
    home = tmp_path / "hermes-home"  # cloudflare_sandbox names a task's workspace by the Hermes home and the task
    home.mkdir()
    try:
        common = ["--backend", "cloudflare_sandbox", "--task", "kit-ws-cli", "--fake-control", control]
        common += ["--hermes-home", home]
        secret = {"BOX_PASSPHRASE": "correct horse battery staple"}
        loaded = _cli("workspace", "load", archive, *common, env=secret)
        assert loaded.returncode == 0, loaded.stderr
        assert f"2 file(s), 2 dir(s), 1 link(s); tree sha256 {digest[:16]}; verified in the sandbox" in loaded.stdout
        out = tmp_path / "again.tar.gz.gpg"
        resaved = _cli("workspace", "save", "--out", out, *common, env=secret)  # a new command, the same sandbox
        assert resaved.returncode == 0, resaved.stderr
        assert f"tree sha256 {digest[:16]}; verified against the sandbox" in resaved.stdout
        assert ws.archive_io.read_tree(out, PASSPHRASE).digest() == digest
        assert "correct horse" not in loaded.stdout + loaded.stderr + resaved.stdout + resaved.stderr
    finally:
        proc.send_signal(2)
        proc.wait(30)

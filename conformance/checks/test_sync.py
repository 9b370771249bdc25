"""sync: Hermes files pushed into the sandbox, deletions, and the copy back on cleanup.

The run's HERMES_HOME (kit.hermes_home) holds skills/kit-skill/SKILL.md,
cache/images/pixel.bin and credentials/service.json (listed in config.yaml
terminal.credential_files).  The sandbox side is read through exec
(sha256sum); the host side is read from disk.  Checks that add host files
put them in fresh, uniquely named sub-directories and remove them again,
because HERMES_HOME is shared by every check in the process.

Where the synced tree lives: "<base>/.hermes", base being the sandbox's
$HOME (the built-ins' choice), or provider.cache_path_base expanded in the
sandbox; the first candidate that holds the kit's skill file is the root.
"""

from __future__ import annotations

import fcntl
import gc
import importlib
import inspect
import logging
import shlex
import shutil
import sys
import tarfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from conformance.checks._support import nonce, out, rc, run, sha256_hex, unverified

pytestmark = pytest.mark.usefixtures("kit")

SKILL = "skills/kit-skill/SKILL.md"
CACHE = "cache/images/pixel.bin"
CREDENTIAL = "credentials/service.json"
KIT_FILES = (SKILL, CACHE, CREDENTIAL)


@pytest.fixture
def forced_sync(monkeypatch):
    """Skip FileSyncManager's 5 s rate limit so every command syncs."""
    monkeypatch.setenv("HERMES_FORCE_FILE_SYNC", "1")


@pytest.fixture
def quick_sync_back_retries(monkeypatch):
    """The kit's stand-in host pauses 2 s, then 4 s, between sync-back attempts, as Hermes does; a check
    of what happens once they all fail need not sit through the pauses (Hermes's own host keeps them)."""
    module = importlib.import_module("tools.environments.file_sync")
    if module.__name__.startswith("conformance.host.standins") and hasattr(module, "_BACKOFF"):
        monkeypatch.setattr(module, "_BACKOFF", tuple(0.01 for _ in module._BACKOFF))


@pytest.fixture
def host_dirs(kit):
    """Fresh sub-directories of HERMES_HOME for one check; removed afterwards."""
    made: list[Path] = []

    def make(parent: str, label: str) -> Path:
        path = Path(kit.hermes_home) / parent / nonce(label)
        path.mkdir(parents=True)
        made.append(path)
        return path

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def _candidates_script(kit) -> str:
    """Shell printing each candidate root of the synced tree, one per line."""
    lines = ['printf "%s\\n" "$HOME/.hermes"']
    base = getattr(kit.provider, "cache_path_base", None)
    if isinstance(base, str) and base.strip():
        lines.append(f'printf "%s\\n" "$(eval echo {shlex.quote(base.strip())})"')
    return "; ".join(lines)


def _hashes_at_roots(kit, env, rels: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """{root: {rel: sha256}} for each candidate root, in one command."""
    rel_args = " ".join(shlex.quote(r) for r in rels)
    script = (
        f'{{ {_candidates_script(kit)}; }} | while IFS= read -r __kit_root; do echo "ROOT $__kit_root"; '
        f'( cd "$__kit_root" 2>/dev/null && sha256sum -- {rel_args} 2>/dev/null ); done; true'
    )
    result = run(env, script, timeout=15)
    roots: dict[str, dict[str, str]] = {}
    current = None
    for line in out(result).splitlines():
        if line.startswith("ROOT "):
            current = line[5:].strip()
            roots.setdefault(current, {})
        elif current and len(line.split(None, 1)) == 2:
            digest, rel = line.split(None, 1)
            roots[current][rel.strip().lstrip("*")] = digest
    return roots


def _host_hash(kit, rel: str) -> str:
    return sha256_hex((Path(kit.hermes_home) / rel).read_bytes())


def _sync_root(kit, env, *, required: bool = True) -> str:
    """The sandbox directory that holds the kit's synced files.

    With required=False a backend that pushed nothing gets the first
    candidate ($HOME/.hermes), for checks that hold even then.
    """
    roots = _hashes_at_roots(kit, env, (SKILL,))
    for root, hashes in roots.items():
        if hashes.get(SKILL) == _host_hash(kit, SKILL):
            return root
    if not required and roots:
        return next(iter(roots))
    raise AssertionError(
        f"the synced skill {SKILL} is under none of the candidate roots {sorted(roots)} in the sandbox"
    )


def _sandbox_sha(env, path: str) -> str | None:
    result = run(env, f"sha256sum -- {shlex.quote(path)}", timeout=10)
    words = out(result).split()
    return words[0] if rc(result) == 0 and words else None


def _put(env, path: str, content: str) -> None:
    q = shlex.quote(path)
    result = run(env, f"mkdir -p \"$(dirname {q})\" && printf '%s' {shlex.quote(content)} > {q}", timeout=10)
    assert rc(result) == 0, f"could not write {path} in the sandbox: {out(result)!r}"


# ------------------------------------------------------------------ initial push
@pytest.mark.clause("sync.initial-push")
def test_hermes_files_are_present_before_the_first_command(kit, make_env):
    env = make_env()
    # The very first command after creation reads the files.
    roots = _hashes_at_roots(kit, env, KIT_FILES)
    expected = {rel: _host_hash(kit, rel) for rel in KIT_FILES}
    if any(hashes == expected for hashes in roots.values()):
        return
    report = {
        root: {
            rel: ("ok" if hashes.get(rel) == digest else "missing" if rel not in hashes else "differs")
            for rel, digest in expected.items()
        }
        for root, hashes in roots.items()
    }
    raise AssertionError(
        f"skill, cache and credential files are not all present with identical content under one "
        f"<base>/.hermes root when the first command runs: {report}"
    )


# ------------------------------------------------------------------ delete
@pytest.mark.clause("sync.delete")
def test_host_deletion_reaches_the_sandbox(kit, make_env, host_dirs, forced_sync):
    folder = host_dirs("skills", "del")
    doomed = folder / "SKILL.md"
    doomed.write_text(f"# {folder.name}\nto be deleted\n")
    rel = doomed.relative_to(kit.hermes_home).as_posix()

    env = make_env()
    root = _sync_root(kit, env)
    assert _sandbox_sha(env, f"{root}/{rel}") == sha256_hex(doomed.read_bytes()), (
        f"{rel} was not pushed by the first sync, so its deletion cannot be followed"
    )
    doomed.unlink()
    # The next command: the file must be gone by the time it runs.
    result = run(env, f"test -e {shlex.quote(f'{root}/{rel}')} && echo still-there || echo gone", timeout=10)
    assert out(result).strip() == "gone", (
        f"{rel} was deleted on the host after the first sync but is still in the sandbox when the next command runs"
    )


# ------------------------------------------------------------------ sync back
@pytest.mark.clause("sync.back")
def test_changed_cache_file_is_copied_back_on_cleanup(kit, host_dirs):
    # A cache file: every host version copies those back (newer hosts refuse skills/).
    folder = host_dirs("cache/images", "back")
    target = folder / "data.txt"
    target.write_text("host version\n")
    rel = target.relative_to(kit.hermes_home).as_posix()
    changed = f"changed in the sandbox {nonce('back')}\n"

    env = kit.create()
    try:
        root = _sync_root(kit, env)
        assert _sandbox_sha(env, f"{root}/{rel}") == sha256_hex(b"host version\n"), f"{rel} was never pushed"
        _put(env, f"{root}/{rel}", changed)
    finally:
        kit.release(env)
    got = target.read_text(errors="replace")
    assert got == changed, (
        f"cleanup() did not copy the sandbox's change of {rel} back to the host: host still has {got!r}"
    )


# ------------------------------------------------------------------ protected
@pytest.mark.clause("sync.protected")
def test_protected_host_files_are_never_overwritten(kit):
    home = Path(kit.hermes_home)
    credential, config, dotenv = home / CREDENTIAL, home / "config.yaml", home / ".env"
    saved = {credential: credential.read_bytes(), config: config.read_bytes()}
    dotenv_existed = dotenv.exists()
    saved_env = dotenv.read_bytes() if dotenv_existed else None
    new_dir = nonce("newdir")
    value = nonce("protected")

    env = kit.create()
    try:
        # A backend that pushed nothing still must not write these back.
        root = _sync_root(kit, env, required=False)
        _put(env, f"{root}/{CREDENTIAL}", f'{{"token": "{value}"}}\n')
        _put(env, f"{root}/config.yaml", f"terminal: {{backend: {value}}}\n")
        _put(env, f"{root}/.env", f"KIT_OVERWRITE={value}\n")
        _put(env, f"{root}/{new_dir}/file.txt", value)
    finally:
        kit.release(env)

    wrong = []
    try:
        for path, before in saved.items():
            if path.read_bytes() != before:
                wrong.append(f"{path.relative_to(home)} was overwritten")
        if dotenv.exists() and dotenv.read_bytes() != saved_env:
            wrong.append(".env was written")
        if (home / new_dir).exists():
            wrong.append(f"the new sandbox directory {new_dir}/ was created on the host")
    finally:
        for path, before in saved.items():
            if path.read_bytes() != before:
                path.write_bytes(before)
        if not dotenv_existed:
            dotenv.unlink(missing_ok=True)
        elif saved_env is not None:
            dotenv.write_bytes(saved_env)
        shutil.rmtree(home / new_dir, ignore_errors=True)
    assert not wrong, "cleanup() wrote protected host files back: " + "; ".join(wrong)


# ------------------------------------------------------------------ cache_path_base
@pytest.mark.clause("sync.cache-path-base")
def test_cache_path_base_holds_the_synced_cache(kit, env):
    base = getattr(kit.provider, "cache_path_base", None)
    assert isinstance(base, str) and base.strip(), (
        f"provider.cache_path_base is {base!r}: the model is shown host cache paths, "
        "not where the sync puts the cache files"
    )
    expanded = out(run(env, f"eval echo {shlex.quote(base.strip())}", timeout=10)).strip()
    assert expanded.startswith("/"), f"cache_path_base {base!r} expands to {expanded!r} in the sandbox"
    digest = _sandbox_sha(env, f"{expanded}/{CACHE}")
    assert digest == _host_hash(kit, CACHE), (
        f"{expanded}/{CACHE} ({base!r} expanded) "
        + ("does not exist" if digest is None else "differs from the host file")
        + "; cache_path_base must name where the sync puts cache files"
    )


# ------------------------------------------------------------------ tar layout
@pytest.fixture
def captured_sync(monkeypatch):
    """Record the callbacks every host FileSyncManager is built with."""
    module = importlib.import_module("tools.environments.file_sync")
    cls = module.FileSyncManager
    original = cls.__init__
    signature = inspect.signature(original)
    seen: list[dict[str, Any]] = []

    def recording_init(self, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
            seen.append(dict(bound.arguments))
        except TypeError:
            pass
        original(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", recording_init)
    return seen


@pytest.mark.clause("sync.tar-layout")
def test_bulk_download_members_are_absolute_remote_paths(kit, make_env, host_dirs, captured_sync, tmp_path):
    """Decision: call the environment's bulk_download_fn exactly as FileSyncManager does.

    The callback is reached generically by recording what the backend passes
    to the host's FileSyncManager (the file-sync capability says it uses one).
    A backend that builds none, or none with a bulk download, can only be
    judged by behaviour: a file changed in the sandbox must come back to its
    own host path, which a wrong member layout cannot achieve.
    """
    folder = host_dirs("cache/images", "tar")
    target = folder / "layout.txt"
    target.write_text("pushed\n")
    env = make_env()
    root = _sync_root(kit, env)
    rel = target.relative_to(kit.hermes_home).as_posix()
    with_download = [a for a in captured_sync if a.get("bulk_download_fn") is not None]
    if not with_download:
        _tar_layout_by_behaviour(kit, env, root, rel, target)
        return

    args = with_download[-1]
    pairs = list(args["get_files_fn"]())
    remote_for = {Path(host).resolve(): remote for host, remote in pairs}
    expected = {}
    for path in (Path(kit.hermes_home) / SKILL, Path(kit.hermes_home) / CACHE, target):
        remote = remote_for.get(path.resolve())
        assert remote is not None, f"the backend's get_files_fn does not list {path}"
        expected[remote] = path.read_bytes()
    archive = tmp_path / "remote.tar"
    args["bulk_download_fn"](archive)
    assert archive.is_file(), "bulk_download_fn(dest) wrote no file at dest"
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        absolute = sorted(n for n in members if n.startswith("/"))
        assert not absolute, f"tar member names start with '/': {absolute[:5]}"
        for remote, data in expected.items():
            name = remote.lstrip("/")
            member = members.get(name)
            assert member is not None and member.isfile(), (
                f"the bulk download tar has no file member {name!r} for remote path {remote!r}; "
                f"members look like {sorted(members)[:5]}"
            )
            fh = tar.extractfile(member)
            got = fh.read() if fh is not None else b""
            assert got == data, f"tar member {name!r} holds {len(got)} bytes that differ from what was pushed"


def _tar_layout_by_behaviour(kit, env, root: str, rel: str, target: Path) -> None:
    changed = f"came back {nonce('tar')}\n"
    _put(env, f"{root}/{rel}", changed)
    kit.cleanup(env)
    got = target.read_text(errors="replace")
    assert got == changed, (
        f"no host FileSyncManager bulk download to inspect, and a change to {rel} did not come back to "
        f"{target} on cleanup(): the sync-back archive layout does not map to the remote paths"
    )


# ------------------------------------------------------------------ protected directories
@pytest.mark.clause("sync.protected-dirs")
def test_skills_plugins_and_symlink_escapes_are_never_written_back(kit, host_dirs, tmp_path):
    home = Path(kit.hermes_home)
    skill_dir = host_dirs("skills", "guard")
    skill = skill_dir / "SKILL.md"
    skill.write_text("# pushed skill\n")
    cache_dir = host_dirs("cache/images", "escape")
    (cache_dir / "data.txt").write_text("pushed\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("outside the Hermes home\n")
    (cache_dir / "link.txt").symlink_to(outside)
    plugin = f"plugins/{nonce('plugin')}"
    value = nonce("guard")

    env = kit.create()
    try:
        root = _sync_root(kit, env)
        skill_rel, cache_rel = skill_dir.relative_to(home).as_posix(), cache_dir.relative_to(home).as_posix()
        assert _sandbox_sha(env, f"{root}/{skill_rel}/SKILL.md") == sha256_hex(b"# pushed skill\n"), (
            f"{skill_rel}/SKILL.md was never pushed, so its protection cannot be observed"
        )
        _put(env, f"{root}/{skill_rel}/SKILL.md", f"# changed in the sandbox {value}\n")
        _put(env, f"{root}/{skill_rel}/added.md", value)
        _put(env, f"{root}/{plugin}/plugin.py", value)
        _put(env, f"{root}/{cache_rel}/link.txt", value)  # a new sandbox file where the host has a symlink
    finally:
        kit.release(env)
    wrong = []
    if skill.read_text() != "# pushed skill\n":
        wrong.append(f"{skill_rel}/SKILL.md was overwritten in skills/")
    if (skill_dir / "added.md").exists():
        wrong.append(f"{skill_rel}/added.md was created in skills/")
    if (home / plugin).exists():
        wrong.append(f"{plugin}/ was created in plugins/")
        shutil.rmtree(home / plugin, ignore_errors=True)
    if outside.read_text() != "outside the Hermes home\n":
        wrong.append(f"{outside}, the target of the host symlink {cache_rel}/link.txt, was written through it")
    assert not wrong, "cleanup() synced back where it must not: " + "; ".join(wrong)


# ------------------------------------------------------------------ new subdirectories
@pytest.mark.clause("sync.back-new-subdir")
def test_files_in_new_subdirectories_come_back(kit, host_dirs):
    folder = host_dirs("cache/images", "subdir")
    (folder / "data.txt").write_text("pushed\n")
    rel = folder.relative_to(kit.hermes_home).as_posix()
    value = f"made in a new subdirectory {nonce('subdir')}\n"

    env = kit.create()
    try:
        root = _sync_root(kit, env)
        assert _sandbox_sha(env, f"{root}/{rel}/data.txt") == sha256_hex(b"pushed\n"), f"{rel} was never pushed"
        _put(env, f"{root}/{rel}/new-sub/deeper/made.txt", value)
    finally:
        kit.release(env)
    target = folder / "new-sub" / "deeper" / "made.txt"
    assert target.is_file(), (
        f"a file the sandbox made in the new subdirectories {rel}/new-sub/deeper/ did not come back to the host "
        "on cleanup()"
    )
    got = target.read_text(errors="replace")
    assert got == value, f"{rel}/new-sub/deeper/made.txt came back with other content: {got!r}"


# ------------------------------------------------------------------ finaliser during a sync-back
LOCK_RELEASE_S = 10.0  # the watchdog frees the lock after this; a finaliser that waited for it blocked
RELEASE_WAIT_S = 5.0  # how long the check waits for other holders of the environment (a command's thread) to let go


def _running_holders(obj: Any) -> list[str]:
    """Functions running now on other threads than this one with ``obj`` (or a method of it) in their locals."""
    found: set[str] = set()
    for thread_id, top in sys._current_frames().items():
        frame = None if thread_id == threading.get_ident() else top
        while frame is not None:
            if any(v is obj or getattr(v, "__self__", None) is obj for v in list(frame.f_locals.values())):
                found.add(f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name})")
            frame = frame.f_back
    return sorted(found)


def _released_elsewhere(obj: Any) -> list[str]:
    """Wait (bounded) until no function running on another thread refers to ``obj``; the ones left, if any."""
    deadline = time.monotonic() + RELEASE_WAIT_S
    while (holders := _running_holders(obj)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return holders


@pytest.mark.clause("lifecycle.gc-finalizer-during-sync")
def test_finalizer_during_a_sync_back_does_not_wait_for_the_lock(kit, host_dirs):
    """Decision: hold the host's sync lock on this thread, as a sync_back would, and collect an
    environment here.  A finaliser that syncs back on this thread would wait for the lock
    forever; a watchdog thread frees it after LOCK_RELEASE_S so the check can end and say so.

    The environment first gets a file pushed and changed in the sandbox, so its cleanup has a
    sync-back to do: a FileSyncManager that pushed nothing skips the sync-back (and the lock)."""
    folder = host_dirs("cache/images", "gc-sync")
    (folder / "pushed.txt").write_text("pushed before the collection\n")
    rel = (folder / "pushed.txt").relative_to(kit.hermes_home).as_posix()
    env = kit.create(track=False)
    root = _sync_root(kit, env)
    # The situation this clause is about needs a sync-back to do: when the setup cannot make one, the
    # clause was not observed (sync.initial-push judges the push itself).
    if _sandbox_sha(env, f"{root}/{rel}") != sha256_hex(b"pushed before the collection\n"):
        kit.release(env)
        unverified(f"{rel} was not pushed into the sandbox, so its cleanup would have nothing to sync back")
    try:
        _put(env, f"{root}/{rel}", f"changed in the sandbox {nonce('gc')}\n")
    except AssertionError as exc:
        kit.release(env)
        unverified(f"the file to sync back could not be changed in the sandbox ({str(exc)[:200]})")
    # The collection below must be the environment's last one: a thread still holding it (a command the
    # backend has not finished with) would run its finaliser later, on that thread, which tests nothing.
    holders = _released_elsewhere(env)
    if holders:
        unverified(
            f"the environment was still in use by {', '.join(holders)} {RELEASE_WAIT_S:g}s after its last command "
            "returned, so no collection on the check's thread could finalise it"
        )
    gone = weakref.ref(env)
    caught: list[str] = []
    freed = threading.Event()
    lock_path = Path(kit.hermes_home) / ".sync.lock"
    previous = sys.unraisablehook
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)

        def free() -> None:
            freed.set()
            fcntl.flock(lock, fcntl.LOCK_UN)

        watchdog = threading.Timer(LOCK_RELEASE_S, free)
        watchdog.daemon = True
        sys.unraisablehook = lambda u: caught.append(f"{u.exc_type.__name__}: {u.exc_value}")
        watchdog.start()
        try:
            del env
            gc.collect()
        finally:
            watchdog.cancel()
            sys.unraisablehook = previous
            fcntl.flock(lock, fcntl.LOCK_UN)
    if gone() is not None:
        unverified("the environment was not collected when the check dropped its last reference to it")
    assert not freed.is_set(), (
        f"garbage collection of an environment waited for the host's sync lock {lock_path.name} "
        f"(HERMES_HOME/{lock_path.name}, flock held on the same thread, as a sync_back in progress holds it) "
        f"until a watchdog freed it after {LOCK_RELEASE_S:g}s: the finaliser's cleanup() syncs back on the "
        "collector's thread and takes the lock through a new handle, which deadlocks that thread in Hermes"
    )
    assert not caught, f"finalizing an environment during a sync-back raised: {caught}"


# ------------------------------------------------------------------ failed sync-back
@pytest.mark.clause("sync.failure-reported")
def test_a_failed_sync_back_is_logged(kit, host_dirs, caplog, quick_sync_back_retries):
    """Decision: make the host side refuse the write (a regular file where the sandbox made a
    directory), so the failure is the same for every backend and transport."""
    folder = host_dirs("cache/images", "fail")
    (folder / "data.txt").write_text("pushed\n")
    (folder / "blocked").write_text("a file where the sandbox makes a directory\n")
    rel = folder.relative_to(kit.hermes_home).as_posix()

    env = kit.create()
    try:
        root = _sync_root(kit, env)
        assert _sandbox_sha(env, f"{root}/{rel}/data.txt") == sha256_hex(b"pushed\n"), f"{rel} was never pushed"
        run(env, f"rm -f {shlex.quote(f'{root}/{rel}/blocked')}", timeout=10)
        _put(env, f"{root}/{rel}/blocked/inside.txt", nonce("fail"))
        with caplog.at_level(logging.WARNING):
            kit.release(env)
    except BaseException:
        kit.release(env)
        raise
    assert not (folder / "blocked").is_dir(), "the host file in the way was replaced by a directory"
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and "sync" in r.getMessage().lower()]
    assert warned, (
        f"copying {rel}/blocked/inside.txt back could not succeed (the host has a file named blocked), "
        "but cleanup() logged no warning about the failed sync-back: the failure was swallowed"
    )

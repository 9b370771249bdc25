"""``hermes-backend-kit workspace save|load``: a Hermes workspace moved between any two backends.

``save`` archives the workspace of a task's sandbox (the environment's working directory, or
``--path``) into the encrypted archive format of ``hermes-box save`` (archives/: OpenPGP AES-256
of a gzipped tar, ``manifest.json`` first with kind ``workspace``, the tree under ``data/``);
``load`` restores such an archive into a task's sandbox on any backend.  Both use the contract's
own operations only: the backend is loaded and its environment created as Hermes does
(conformance.run), and every byte crosses through ``execute()`` with ``stdin_data`` and its
output (conformance.workspace_shell): no vendor API, so any certified backend can take part.

What is kept: file bytes, permission bits (executable bits included), symbolic links as links
(never followed), empty directories.  Not kept: owners (files belong to the sandbox's user),
timestamps beyond what tar restores, extended attributes, hard-link identity, sockets, FIFOs and
devices (counted and reported), and Hermes's own top-level ``.hermes*`` entries (synced skills,
credentials, a backend's temp dirs: see conformance.workspace_tree.HOST_MANAGED_PATTERNS).

Both directions are verified: the tree is listed inside the sandbox (GNU find and sha256sum
through ``execute``) and compared with the tree the archive holds, entry by entry
(conformance.workspace_tree); ``--no-verify`` skips it for very large trees.

``load`` reads the whole archive (decrypting it and validating every member) before it creates
or touches any sandbox: a wrong passphrase, a damaged or unsafe archive is refused with nothing
written anywhere.  A destination that holds anything (Hermes's own entries aside) is refused
unless ``--force``, which empties it first.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import posixpath
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archives.tarball import forget_members
from conformance import workspace_archive as archive_io
from conformance import workspace_tree as wt
from conformance.errors import UsageError
from conformance.workspace_shell import (
    Probe,
    SandboxShell,
    SandboxToolsMissing,
    TransferFailed,
    WorkspaceError,
    q,
)

__all__ = ["LoadResult", "SaveResult", "WorkspaceError", "load", "save", "tree_of"]


class DestinationNotEmpty(WorkspaceError):
    fix = "load into an empty directory (--path), or pass --force to replace what it holds"


class VerificationFailed(WorkspaceError):
    fix = "run the command again when nothing writes into the workspace; if it still differs, rerun with --debug"


@dataclass
class Figures:
    payload_bytes: int  # bytes of file data in the tree
    wire_bytes: int  # bytes moved through execute() (gzip-compressed tar when the sandbox has gzip)
    calls: int  # execute() calls
    retries: int  # chunks asked for again at a smaller size (a backend's output or input limit)
    seconds: float
    compressed: bool


@dataclass
class SaveResult:
    out: Path
    root: str  # the workspace directory in the sandbox
    tree: wt.Tree
    verified: bool
    skipped: list[str]  # sockets, FIFOs, devices left out
    figures: Figures


@dataclass
class LoadResult:
    root: str
    tree: wt.Tree
    verified: bool
    replaced: bool  # --force emptied a non-empty destination
    figures: Figures


# -- progress ----------------------------------------------------------------------------------
class Progress:
    """What a transfer shows: phases, some counting bytes towards a total.  This one shows nothing."""

    def phase(self, name: str, total: int | None = None, *, counts: bool = False) -> Callable[[int], None]:
        """Start the phase ``name`` (ending the previous one); the callable advances it by a byte count."""
        return lambda _n: None

    def close(self) -> None:
        pass


class TerminalProgress(Progress):
    """A rich display on stderr, one line per phase (bytes, rate and elapsed time where it counts
    bytes); used only when stderr is a terminal."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as RichProgress
        from rich.text import Text

        class OnlyBytes(ProgressColumn):
            def __init__(self, inner: ProgressColumn) -> None:
                super().__init__()
                self.inner = inner

            def render(self, task: Any) -> Any:
                return self.inner.render(task) if task.fields.get("counts") else Text("")

        self._bar = RichProgress(
            TextColumn("{task.description:<26}"),
            BarColumn(),
            OnlyBytes(DownloadColumn()),
            OnlyBytes(TransferSpeedColumn()),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self._bar.start()
        self._current: Any = None

    def phase(self, name: str, total: int | None = None, *, counts: bool = False) -> Callable[[int], None]:
        self._end_current()
        task = self._bar.add_task(name, total=total, counts=counts or total is not None)
        self._current = task
        return lambda count: self._bar.advance(task, count)

    def _end_current(self) -> None:
        if self._current is None:
            return
        task = next(t for t in self._bar.tasks if t.id == self._current)
        done = task.completed if task.fields.get("counts") else 1
        self._bar.update(self._current, total=max(done, 1) if task.total is None else task.total, completed=done)
        self._bar.stop_task(self._current)
        self._current = None

    def close(self) -> None:
        self._end_current()
        self._bar.stop()


def progress_for(stream: Any = None) -> Progress:
    """A bar on a terminal, nothing otherwise (pipes, CI logs)."""
    stream = sys.stderr if stream is None else stream
    try:
        tty = bool(stream.isatty()) and os.environ.get("TERM", "") not in ("", "dumb")
    except (AttributeError, ValueError):
        tty = False
    return TerminalProgress() if tty else Progress()


# -- shared steps ----------------------------------------------------------------------------------
def _resolve_root(path: str | None, probe: Probe) -> str:
    """The workspace directory as an absolute sandbox path: --path (absolute, ~/..., or relative
    to the environment's working directory), else that working directory."""
    if not probe.base:
        raise TransferFailed("the sandbox did not say its working directory (pwd)")
    if not path:
        return probe.base
    if path == "~" or path.startswith("~/"):
        if not probe.home:
            raise UsageError(f"--path {path}: the sandbox has no $HOME", "give an absolute --path")
        path = probe.home + path[1:]
    return posixpath.normpath(posixpath.join(probe.base, path))


def _prunes(root: str, tmp: str) -> str:
    """find's prune of Hermes's own entries, and of the transfer's temp dir when it lies inside the root."""
    extra = []
    if tmp.startswith(root.rstrip("/") + "/"):
        extra.append("./" + tmp[len(root.rstrip("/")) + 1 :])
    return wt.prune_expression(extra)


def _require_tools(probe: Probe) -> None:
    missing = probe.missing()
    if missing:
        raise SandboxToolsMissing(
            f"the sandbox lacks what a workspace transfer needs: {', '.join(missing)}",
            why="the workspace crosses as a tar through base64 in execute(), checked with sha256sum and GNU find",
        )
    if not probe.tmp:
        raise TransferFailed("mktemp -d failed in the sandbox", fix="make the sandbox's temp directory writable")


def _remove_tmp(shell: SandboxShell, probe: Probe | None) -> None:
    if probe is None or not probe.tmp:
        return
    try:
        shell.step(f"rm -rf -- {q(probe.tmp)}", timeout=120)
    except Exception:
        pass  # best effort: the sandbox's temp directory is its own to clean


def _sandbox_tree(shell: SandboxShell, root: str, probe: Probe, progress: Progress) -> wt.Tree:
    """The workspace as the sandbox sees it: listed and hashed inside, parsed here."""
    progress.phase("hashing in the sandbox")
    listing = f"{probe.tmp}/tree"
    out = shell.check(
        f"[ -d {q(root)} ] || {{ echo missing; exit 0; }}\n"
        f"cd -- {q(root)} || exit 3\n"
        f"{wt.listing_script(listing, _prunes(root, probe.tmp))} || exit 4\n"
        f"printf '%s %s\\n' \"$(wc -c < {q(listing)})\" \"$(sha256sum < {q(listing)} | cut -d ' ' -f 1)\"",
        "listing the workspace",
    )
    if out.strip() == "missing":
        raise _no_directory(root)
    size_text, digest = out.split()
    raw = shell.read_file(listing, int(size_text), digest, lambda _n: None)
    try:
        return wt.parse_listing(raw)
    except ValueError as exc:
        raise TransferFailed("the sandbox's tree listing could not be read", why=str(exc)) from exc


def _no_directory(root: str) -> WorkspaceError:
    return WorkspaceError(
        f"the sandbox has no directory {root}",
        fix="give the workspace directory with --path (default: the environment's working directory)",
    )


def _figures(shell: SandboxShell, payload: int, wire: int, started: float, compressed: bool) -> Figures:
    return Figures(payload, wire, shell.calls, shell.retries, time.monotonic() - started, compressed)


def tree_of(env: Any, path: str | None = None) -> wt.Tree:
    """The workspace tree of ``env`` as its sandbox lists and hashes it (through execute only)."""
    shell = SandboxShell(env)
    probe = shell.probe()
    try:
        _require_tools(probe)
        return _sandbox_tree(shell, _resolve_root(path, probe), probe, Progress())
    finally:
        _remove_tmp(shell, probe)


# -- save ------------------------------------------------------------------------------------------
def save(
    env: Any,
    out: Path,
    passphrase: Any,
    *,
    path: str | None = None,
    name: str = "workspace",
    verify: bool = True,
    progress: Progress | None = None,
) -> SaveResult:
    """Archive the workspace of ``env`` (an environment as Hermes builds it) into ``out``."""
    progress = progress or Progress()
    out = Path(out)
    archive_io.check_new_output(out)
    started = time.monotonic()
    shell = SandboxShell(env)
    probe = shell.probe()
    try:
        _require_tools(probe)
        root = _resolve_root(path, probe)
        compressed = "gzip" in probe.tools
        pack = f"{probe.tmp}/pack"
        expected = _sandbox_tree(shell, root, probe, progress) if verify else None
        if expected is not None:
            archive_io.check_tree(expected)  # an unsafe link or a too large tree: refused before any transfer
        progress.phase("packing in the sandbox")
        meta = _pack(shell, root, probe, pack, compressed)
        fetched = progress.phase("fetching the workspace", meta["size"])
        reader = io.BufferedReader(_ChunkReader(shell.iter_file(pack, meta["size"], meta["sha"], fetched)))
        stream: Any = gzip.GzipFile(fileobj=reader, mode="rb") if compressed else reader
        payload = archive_io.write_workspace(out, stream, name=name, passphrase=passphrase)
        tree, verified = expected if expected is not None else wt.Tree(), False
        if expected is not None:
            progress.phase("checking the archive")
            written = archive_io.read_tree(out, passphrase)
            found = wt.differences(expected, written)
            if found:
                out.unlink(missing_ok=True)
                raise VerificationFailed(
                    f"the archive does not hold the workspace it was made from ({len(found)}+ difference(s)); "
                    f"{out} was removed",
                    why="; ".join(found),
                )
            tree, verified = written, True
        skipped = list(expected.skipped) if expected is not None else []
        if not skipped and meta["special"]:
            skipped = [f"{meta['special']} socket(s), FIFO(s) or device(s)"]
        figures = _figures(shell, payload, meta["size"], started, compressed)
        return SaveResult(out, root, tree, verified, skipped, figures)
    finally:
        _remove_tmp(shell, probe)
        progress.close()


def _pack(shell: SandboxShell, root: str, probe: Probe, pack: str, compressed: bool) -> dict[str, Any]:
    """Tar the workspace into ``pack`` in the sandbox: regular files, directories and links only."""
    prune = _prunes(root, probe.tmp)
    listing = q(f"{probe.tmp}/members")
    squeeze = "gzip -1 -c" if compressed else "cat"
    out = shell.check(
        f"if [ ! -d {q(root)} ]; then echo missing; exit 0; fi\n"
        f"cd -- {q(root)} || exit 3\n"
        f"find . -mindepth 1 {prune} -o \\( -type f -o -type d -o -type l \\) -print0 > {listing} || exit 4\n"
        f"printf 'special %s\\n' \"$(find . -mindepth 1 {prune} -o ! -type f ! -type d ! -type l -printf x | wc -c)\"\n"
        f"tar --null --no-recursion -T {listing} --hard-dereference --numeric-owner -cf - | {squeeze} > {q(pack)}\n"
        'set -- "${PIPESTATUS[@]}"\n'
        'printf \'status %s %s\\n\' "$1" "$2"\n'
        '[ "$1" -le 1 ] && [ "$2" = 0 ] || exit 5\n'
        f"printf 'size %s\\n' \"$(wc -c < {q(pack)})\"\n"
        f"printf 'sha %s\\n' \"$(sha256sum < {q(pack)} | cut -d ' ' -f 1)\"",
        "packing the workspace",
    )
    if out.strip() == "missing":
        raise _no_directory(root)
    meta: dict[str, Any] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        meta[key] = value
    try:
        return {"size": int(meta["size"]), "sha": meta["sha"], "special": int(meta.get("special") or 0)}
    except (KeyError, ValueError) as exc:
        raise TransferFailed("packing the workspace printed no size and checksum", why=out[-300:]) from exc


class _ChunkReader(io.RawIOBase):
    """A sandbox file as a forward-only readable stream, fetched in checked chunks as it is read."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__()
        self._chunks = chunks
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        count = min(len(buffer), len(self._buffer))
        buffer[:count] = self._buffer[:count]
        self._buffer = self._buffer[count:]
        return count


# -- load ------------------------------------------------------------------------------------------
def load(
    archive: Path,
    passphrase: Any,
    env: Any,
    *,
    path: str | None = None,
    force: bool = False,
    verify: bool = True,
    progress: Progress | None = None,
) -> LoadResult:
    """Restore ``archive`` into the workspace of ``env``.

    ``env`` is an environment, or a callable that makes one: it is called only once the whole
    archive has been decrypted and validated, so a refused archive creates no sandbox and sends
    nothing to one.
    """
    progress = progress or Progress()
    archive = Path(archive)
    started = time.monotonic()
    try:
        archive_io.check_input(archive)
        checking = progress.phase("checking the archive", archive.stat().st_size)
        seen = [0]

        def checked(done: int, _total: int | None) -> None:
            checking(done - seen[0])
            seen[0] = done

        with archive_io.validated_members(archive, passphrase, checked) as (total, items):
            environment = env() if callable(env) and not hasattr(env, "execute") else env
            return _restore(environment, total, items, path, force, verify, progress, started)
    finally:
        progress.close()


def _restore(
    env: Any, total: int, items: Any, path: str | None, force: bool, verify: bool, progress: Progress, started: float
) -> LoadResult:
    shell = SandboxShell(env)
    probe = shell.probe()
    try:
        _require_tools(probe)
        root = _resolve_root(path, probe)
        replaced = _check_destination(shell, root, probe, force=force)
        compressed = "gzip" in probe.tools
        stage = f"{probe.tmp}/stage"
        appender = shell.appender(stage, lambda _n: None)
        builder = wt.TreeBuilder()
        _send_tree(items, appender, compressed, builder, progress.phase("sending the workspace", total))
        expected = builder.tree
        progress.phase("unpacking in the sandbox")
        _unpack(shell, root, probe, stage, appender.size, appender.sha.hexdigest(), compressed, replace=replaced)
        verified = False
        if verify:
            found = wt.differences(expected, _sandbox_tree(shell, root, probe, progress))
            if found:
                raise VerificationFailed(
                    f"the restored workspace in {root} differs from the archive ({len(found)}+ difference(s))",
                    why="; ".join(found),
                )
            verified = True
        figures = _figures(shell, expected.file_bytes, appender.size, started, compressed)
        return LoadResult(root, expected, verified, replaced, figures)
    finally:
        _remove_tmp(shell, probe)


def _check_destination(shell: SandboxShell, root: str, probe: Probe, *, force: bool) -> bool:
    """Refuse a destination that is not a directory, or holds anything without --force; True when
    --force will replace what it holds."""
    prune = _prunes(root, probe.tmp)
    out = shell.check(
        f"if [ -d {q(root)} ]; then cd -- {q(root)} || exit 3; "
        f"printf 'dir %s\\n' \"$(find . -mindepth 1 -maxdepth 1 {prune} -o -printf x | head -c 1 | wc -c)\"; "
        f"elif [ -e {q(root)} ] || [ -L {q(root)} ]; then echo other; else echo missing; fi",
        "inspecting the destination",
    ).strip()
    if out == "other":
        raise WorkspaceError(
            f"the destination {root} in the sandbox exists and is not a directory",
            fix="give a directory (or a path that does not exist yet) with --path",
        )
    if out == "dir 1":
        if force and root == "/":
            raise WorkspaceError(
                "--force would empty the sandbox's root directory /", fix="load into a directory of its own (--path)"
            )
        if not force:
            raise DestinationNotEmpty(f"the destination {root} in the sandbox is not empty")
        return True
    return False


def _send_tree(
    items: Any, appender: Any, compressed: bool, builder: wt.TreeBuilder, progress: Callable[[int], None]
) -> None:
    """Stream the archive's validated members into the sandbox as one tar (gzip-compressed when the
    sandbox has gzip), noting each entry in ``builder`` on the way."""
    sink: Any = gzip.GzipFile(fileobj=appender, mode="wb", compresslevel=1, mtime=0) if compressed else appender
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for info, data in items:
            rel = wt.relative_name(info.name)
            if not rel:
                continue
            member = tarfile.TarInfo(rel)
            member.mode, member.mtime = info.mode & 0o7777, int(info.mtime)
            if info.isdir():
                member.type = tarfile.DIRTYPE
                builder.directory(rel, member.mode)
                tar.addfile(member)
            elif info.issym():
                member.type, member.linkname = tarfile.SYMTYPE, info.linkname
                builder.symlink(rel, info.linkname)
                tar.addfile(member)
            elif info.islnk():
                member.type, member.linkname = tarfile.LNKTYPE, wt.relative_name(info.linkname)
                builder.hardlink(rel, member.linkname)
                tar.addfile(member)
            else:
                member.size = info.size
                hashing = _Hashing(data, progress)
                tar.addfile(member, hashing)
                builder.tree.add(wt.Entry(rel, wt.FILE, member.mode, hashing.sha.hexdigest(), hashing.count))
            forget_members(tar)
    if compressed:
        sink.close()
    appender.close()


class _Hashing(io.RawIOBase):
    """A member's data, hashed and counted as tarfile reads it."""

    def __init__(self, source: Any, progress: Callable[[int], None]) -> None:
        super().__init__()
        self._source, self._progress = source, progress
        self.sha = hashlib.sha256()
        self.count = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        data = self._source.read(size)
        self.sha.update(data)
        self.count += len(data)
        self._progress(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _unpack(
    shell: SandboxShell, root: str, probe: Probe, stage: str, size: int, sha: str, compressed: bool, *, replace: bool
) -> None:
    prune = _prunes(root, probe.tmp)
    empty = f"find . -mindepth 1 -maxdepth 1 {prune} -o -exec rm -rf -- {{}} + || exit 7\n" if replace else ""
    shell.check(
        f'[ "$(wc -c < {q(stage)})" = {size} ] || exit 6\n'
        f'[ "$(sha256sum < {q(stage)} | cut -d " " -f 1)" = {sha} ] || exit 6\n'
        f"mkdir -p -- {q(root)} && cd -- {q(root)} || exit 3\n"
        f"{empty}"
        f"tar -x {'-z ' if compressed else ''}-p --no-same-owner -f {q(stage)} || exit 5\n"
        f"rm -f {q(stage)}",
        "unpacking the workspace",
    )


# -- the command line ----------------------------------------------------------------------------------
@contextmanager
def _kit_run(args: Any) -> Iterator[Any]:
    """A conformance run for the backend (its fake started unless --live or --fake-control), closed after."""
    import shutil
    import tempfile

    from conformance import leftovers
    from conformance.run import KitRun, RunOptions

    workdir = Path(tempfile.mkdtemp(prefix="kit-workspace-"))
    try:
        run = KitRun.start(
            RunOptions(
                backend=args.backend,
                backend_config=args.backend_config,
                host=args.host,
                fake=args.fake,
                live=args.live,
                fake_control=args.fake_control,
            ),
            workdir,
        )
        try:
            yield run
        finally:
            run.close()
    finally:
        leftovers.end_processes_under(workdir)
        shutil.rmtree(workdir, ignore_errors=True)


def _fake_note(run: Any, args: Any) -> None:
    name = getattr(run.fake, "name", None)
    if name and not args.fake_control:
        print(
            f"note: the {name} fake started for this command is removed when it ends, with its sandboxes; "
            "to keep them between commands run `hermes-backend-kit fake serve VENDOR` and pass --fake-control",
            file=sys.stderr,
        )


def _hermes_home(args: Any) -> Path | None:
    """The Hermes home the backend sees: --hermes-home; with --live the user's own (HERMES_HOME, else
    ~/.hermes), so the backend reads the user's terminal settings and reaches the sandbox the user's
    Hermes uses for the task; None (the run's private home) for a fake."""
    if args.hermes_home:
        return Path(args.hermes_home).expanduser().resolve()
    if args.live:
        return Path(os.environ.get("HERMES_HOME") or "~/.hermes").expanduser()
    return None


class _Backend:
    """One command's backend: the kit's run (started on first use), the Hermes home it sees, the
    task's environment; everything undone by ``stack`` in order (environment, home, run)."""

    def __init__(self, args: Any, stack: contextlib.ExitStack) -> None:
        self.args, self.stack = args, stack
        self.home = _hermes_home(args)  # read before the run sets its own HERMES_HOME

    def environment(self) -> Any:
        """The task's environment as Hermes makes a persistent one: save finds the task's sandbox,
        load leaves it in place."""
        run = self.stack.enter_context(_kit_run(self.args))
        _fake_note(run, self.args)
        if self.home is not None:
            self._use_home(run, self.home)
        env = run.create(self.args.task, persistent=True, track=False)
        self.stack.callback(run.release, env)
        return env

    def _use_home(self, run: Any, home: Path) -> None:
        import yaml

        private = os.environ.get("HERMES_HOME")
        os.environ["HERMES_HOME"] = str(home)
        self.stack.callback(_put_back, "HERMES_HOME", private)
        try:
            data = yaml.safe_load((home / "config.yaml").read_text("utf-8")) or {}
        except (OSError, yaml.YAMLError):
            data = {}
        terminal = data.get("terminal") if isinstance(data, dict) else None
        for key, value in (terminal if isinstance(terminal, dict) else {}).items():
            run.terminal_config.setdefault(key, value)  # --backend-config's terminal keys win


def _put_back(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _describe(figures: Figures) -> str:
    rate = figures.wire_bytes / figures.seconds / 1024 / 1024 if figures.seconds else 0.0
    return (
        f"{figures.payload_bytes} bytes of file data, {figures.wire_bytes} bytes through execute() "
        f"({'gzip' if figures.compressed else 'uncompressed'}) in {figures.calls} call(s), "
        f"{figures.seconds:.1f}s ({rate:.2f} MiB/s)"
        + (f", {figures.retries} chunk(s) resent smaller" if figures.retries else "")
    )


def _failed(exc: WorkspaceError, args: Any) -> int:
    """A transfer that ran and failed (exit 1, as for any answer that is no): one ``error:`` line."""
    import traceback

    from conformance import redact

    redact.register_environ()
    if getattr(args, "debug", False):
        print(redact.redact("".join(traceback.format_exception(exc))), file=sys.stderr, end="")
    print(redact.redact(f"error: {exc.line()}"), file=sys.stderr)
    if exc.why:
        print(redact.redact(f"  why: {' '.join(exc.why.split())}"), file=sys.stderr)
    return 1


def cmd_save(args: Any) -> int:
    try:
        return _save_command(args)
    except (TransferFailed, VerificationFailed) as exc:
        return _failed(exc, args)


def cmd_load(args: Any) -> int:
    try:
        return _load_command(args)
    except (TransferFailed, VerificationFailed) as exc:
        return _failed(exc, args)


def _save_command(args: Any) -> int:
    out = Path(args.out)
    archive_io.check_new_output(out)
    passphrase = archive_io.obtain_passphrase(confirm=True)
    progress = progress_for()
    with archive_io.withheld_from_children(), contextlib.ExitStack() as stack:
        env = _Backend(args, stack).environment()
        result = save(
            env,
            out,
            passphrase,
            path=args.path,
            name=args.name or args.task,
            verify=not args.no_verify,
            progress=progress,
        )
    print(f"saved {result.root} of task {args.task} on {args.backend} to {result.out}")
    if result.verified and not result.tree.entries:
        print(
            f"note: the workspace is empty. If files were expected, the backend made a new sandbox for task "
            f"{args.task} in this command: a fake started by the command is new, a backend may name a task's "
            "sandbox by the Hermes home (--hermes-home) or never reattach to another process's sandbox "
            "(docs/workspace-transfer.md)",
            file=sys.stderr,
        )
    print(
        f"  {result.tree.summary()}; verified against the sandbox"
        if result.verified
        else "  not verified (--no-verify)"
    )
    if result.skipped:
        print(f"  left out (not files, dirs or links): {', '.join(result.skipped[:5])}")
    print(f"  {_describe(result.figures)}")
    return 0


def _load_command(args: Any) -> int:
    archive = Path(args.archive)
    archive_io.check_input(archive)
    passphrase = archive_io.obtain_passphrase(confirm=False)
    progress = progress_for()
    with archive_io.withheld_from_children(), contextlib.ExitStack() as stack:
        backend = _Backend(args, stack)  # started only once the archive has passed validation
        result = load(
            archive,
            passphrase,
            backend.environment,
            path=args.path,
            force=args.force,
            verify=not args.no_verify,
            progress=progress,
        )
    replaced = " (its previous contents replaced)" if result.replaced else ""
    print(f"loaded {archive} into {result.root}{replaced} of task {args.task} on {args.backend}")
    print(f"  {result.tree.summary()}" + ("; verified in the sandbox" if result.verified else "; not verified"))
    print(f"  {_describe(result.figures)}")
    return 0


def add_parser(sub: Any) -> None:
    """The ``workspace`` command and its ``save`` and ``load`` actions."""
    import argparse

    w = sub.add_parser(
        "workspace",
        help="save a task's workspace from any backend into an encrypted archive, or load one into any backend",
        description=(__doc__ or "").split("\n\n")[0],
    )
    wsub = w.add_subparsers(dest="action", required=True)
    s = wsub.add_parser("save", help="archive the workspace of TASK's sandbox into FILE (never overwrites)")
    s.add_argument("--out", required=True, metavar="FILE", help="the archive to write (.tar.gz.gpg)")
    s.add_argument("--name", help="the name recorded in the archive's manifest (default: the task)")
    s.set_defaults(func=cmd_save)
    ld = wsub.add_parser("load", help="restore the workspace archive FILE into TASK's sandbox")
    ld.add_argument("archive", metavar="FILE", help="an archive from `workspace save` (or a GnuPG-made one)")
    ld.add_argument(
        "--force", action="store_true", help="replace what a non-empty destination holds (it is emptied first)"
    )
    ld.set_defaults(func=cmd_load)
    for p in (s, ld):
        p.add_argument(
            "--backend", required=True, metavar="SPEC", help="a backend name, plugin directory, module:attr or ep:NAME"
        )
        p.add_argument("--task", required=True, help="the Hermes task id whose sandbox holds the workspace")
        p.add_argument(
            "--path",
            help="the workspace directory in the sandbox: absolute, ~/..., or relative to the working "
            "directory (default: the environment's working directory)",
        )
        p.add_argument("--backend-config", metavar="FILE", help="YAML for the backend (as for certify)")
        mode = p.add_mutually_exclusive_group()
        mode.add_argument(
            "--fake", metavar="VENDOR", help="run against the kit's fake of VENDOR (implied for known backends)"
        )
        mode.add_argument(
            "--live", action="store_true", help="use the real service with the credentials in your environment"
        )
        mode.add_argument(
            "--fake-control",
            metavar="ADDRESS",
            help="use the fake started with `fake serve` at this control address (its sandboxes outlive the command)",
        )
        p.add_argument(
            "--hermes-home",
            metavar="DIR",
            help="the Hermes home the backend sees (its config.yaml terminal settings, the files Hermes "
            "syncs); default with --live: $HERMES_HOME or ~/.hermes, as your Hermes sees it; "
            "otherwise a private one",
        )
        p.add_argument("--host", default="auto", choices=["auto", "builtin", "hermes"], help=argparse.SUPPRESS)
        p.add_argument("--no-verify", action="store_true", help="skip listing and hashing the tree in the sandbox")

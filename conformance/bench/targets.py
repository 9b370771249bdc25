"""What is measured: plain local ``bash -c`` and a backend on its fake, behind one interface.

Both sides do the same work per figure, so a ratio compares like with like:
the baseline runs the very same shell through subprocess, with no Hermes
host and no sandbox.  A backend is driven exactly as Hermes drives it: an
environment from the host's factory, ``execute()`` with or without bounded
capture, ``stdin_data``, and file sync through the host's FileSyncManager.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from conformance.bench.measure import flood_command
from conformance.bench.minimal import ColdSample

# Slack over a call's own timeout before the bench calls a backend hung.
GRACE_S = 30.0
CALL_TIMEOUT_S = 600


class Unsupported(Exception):
    """The target lacks what a figure needs; the message is the reason shown as n/a."""


@dataclass
class SyncTree:
    """Host files for the sync figure: ``count`` small files plus one big file, under ``root``."""

    root: Path
    count: int
    small_size: int
    big_size: int

    def make(self) -> None:
        for i in range(self.count):
            folder = self.root / f"d{i // 100:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            # Distinct content per file: a sync that deduplicates cannot cheat.
            (folder / f"f{i:05d}.txt").write_bytes(f"{i:08d}".encode().ljust(self.small_size, b"."))
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "big.bin", "wb") as fh:
            left = self.big_size
            while left:  # incompressible, so a compressing transport is measured honestly
                chunk = os.urandom(min(left, 1 << 20))
                fh.write(chunk)
                left -= len(chunk)

    @property
    def total_files(self) -> int:
        return self.count + 1

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class SyncResult:
    push_s: float
    back_s: float | None  # None: the target has no way back
    files_seen: int
    big_bytes_seen: int


class Target(Protocol):
    name: str
    label: str

    def cold_start(self) -> ColdSample: ...
    def round_trip(self) -> None: ...
    def flood(self, size: int, *, bounded: bool) -> int: ...
    def stdin(self, data: str) -> int: ...
    def sync(self, tree_size: tuple[int, int, int]) -> SyncResult: ...
    def close(self) -> None: ...


def _check(received: int, size: int, what: str) -> int:
    if received < size:
        raise RuntimeError(f"{what}: {received} bytes came back, {size} were written")
    return received


# --------------------------------------------------------------------- baseline
class LocalBash:
    """The baseline: ``bash -c`` through subprocess in this process."""

    name = "local"
    label = "local bash -c (baseline)"
    capabilities = frozenset({"stdin-stream", "file-sync"})

    def __init__(self, workdir: Path):
        self.workdir = workdir

    def cold_start(self) -> ColdSample:
        # A fresh working directory and the first command in it.
        started = time.perf_counter()
        box = Path(tempfile.mkdtemp(prefix="cold-", dir=self.workdir))
        created = time.perf_counter() - started
        subprocess.run(["bash", "-c", "true"], cwd=box, check=True)
        done = time.perf_counter() - started
        shutil.rmtree(box)
        return ColdSample(created, done)

    def round_trip(self) -> None:
        subprocess.run(["bash", "-c", "true"], check=True)

    def flood(self, size: int, *, bounded: bool) -> int:
        proc = subprocess.Popen(["bash", "-c", flood_command(size)], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        total, chunks = 0, []
        while chunk := proc.stdout.read(65536):
            total += len(chunk)
            if not bounded:
                chunks.append(chunk)
        proc.wait()
        if not bounded:  # Hermes hands back one str: pay for the join and the decode too
            total = len(b"".join(chunks).decode("utf-8", "replace"))
        return _check(total, size, "local flood")

    def stdin(self, data: str) -> int:
        proc = subprocess.run(
            ["bash", "-c", "wc -c"], input=data.encode("utf-8", "surrogateescape"), stdout=subprocess.PIPE, check=True
        )
        return int(proc.stdout.split()[0])

    def sync(self, tree_size: tuple[int, int, int]) -> SyncResult:
        """The same tree copied with tar between two local directories, there and back."""
        count, small, big = tree_size
        src = Path(tempfile.mkdtemp(prefix="sync-src-", dir=self.workdir))
        dst = Path(tempfile.mkdtemp(prefix="sync-dst-", dir=self.workdir))
        back = Path(tempfile.mkdtemp(prefix="sync-back-", dir=self.workdir))
        tree = SyncTree(src / "bench", count, small, big)
        tree.make()
        try:
            copy = "tar -C {a} -cf - . | tar -C {b} -xf -"
            started = time.perf_counter()
            subprocess.run(["bash", "-c", copy.format(a=shlex.quote(str(src)), b=shlex.quote(str(dst)))], check=True)
            push = time.perf_counter() - started
            started = time.perf_counter()
            subprocess.run(["bash", "-c", copy.format(a=shlex.quote(str(dst)), b=shlex.quote(str(back)))], check=True)
            back_s = time.perf_counter() - started
            seen = sum(1 for p in (dst / "bench").rglob("*") if p.is_file())
            return SyncResult(push, back_s, seen, (dst / "bench" / "big.bin").stat().st_size)
        finally:
            for d in (src, dst, back):
                shutil.rmtree(d, ignore_errors=True)

    def close(self) -> None:
        return None


# --------------------------------------------------------------------- a backend
class KitBackend:
    """A backend on its fake, loaded by KitRun as the conformance suite loads it."""

    def __init__(self, name: str, workdir: Path, options: Any = None):
        """``name``: a backend the kit knows, on its fake; ``options``: a RunOptions for any other spec."""
        from conformance.run import KitRun, RunOptions

        self.name = name
        self.label = name
        self.run = KitRun.start(options or RunOptions(backend=name), workdir)
        self.capabilities = frozenset(self.run.capabilities.present)
        self._env: Any = None

    @property
    def env(self) -> Any:
        """The warm environment shared by the round-trip, output, stdin and concurrency figures."""
        if self._env is None:
            self._env = self.run.create(persistent=False)
        return self._env

    def _execute(self, env: Any, command: str, **kwargs: Any) -> dict[str, Any]:
        from conformance.host.calls import bounded

        return bounded(
            env.execute,
            command,
            timeout=CALL_TIMEOUT_S,
            deadline=CALL_TIMEOUT_S + GRACE_S,
            what=f"{self.name} execute({command[:40]!r})",
            **kwargs,
        )

    def _ok(self, result: dict[str, Any], what: str) -> dict[str, Any]:
        code = int(result.get("returncode", 0) or 0)
        if code != 0:
            raise RuntimeError(f"{self.name}: {what} exited {code}: {str(result.get('output'))[-300:]!r}")
        return result

    def cold_start(self) -> ColdSample:
        """create_environment() and the first ``true``; the release afterwards is not timed."""
        started = time.perf_counter()
        env = self.run.create(persistent=False)
        try:
            created = time.perf_counter() - started
            self._ok(self._execute(env, "true"), "first command")
            ended = time.perf_counter()
        finally:
            self.run.release(env)
        return ColdSample(created, ended - started, ended)

    def round_trip(self) -> None:
        self._ok(self._execute(self.env, "true"), "true")

    def flood(self, size: int, *, bounded: bool) -> int:
        result = self._ok(self._execute(self.env, flood_command(size), bounded_capture=bounded), "flood")
        # Bounded capture keeps head and tail and reports the total it saw.
        received = int(result.get("output_total_chars") or len(result.get("output", "")))
        return _check(received, size, f"{self.name} flood")

    def stdin(self, data: str) -> int:
        if "stdin-stream" not in self.capabilities:
            raise Unsupported("backend does not declare capability stdin-stream")
        result = self._ok(self._execute(self.env, "wc -c", stdin_data=data), "wc -c")
        return int(result.get("output", "").split()[0])

    def sync(self, tree_size: tuple[int, int, int]) -> SyncResult:
        """Push a new tree through Hermes's file sync on the next command, then copy back on cleanup."""
        if "file-sync" not in self.capabilities:
            raise Unsupported("backend does not declare capability file-sync (Hermes's files are not synced)")
        label = f"bench-{uuid.uuid4().hex[:8]}"
        rel = f"cache/documents/{label}"  # a directory every host's iter_sync_files walks
        tree = SyncTree(Path(self.run.hermes_home) / rel, *tree_size)
        env = self.run.create(persistent=False)  # fresh: its first sync held only the kit's files
        released = False
        try:
            tree.make()
            os.environ["HERMES_FORCE_FILE_SYNC"] = "1"  # past FileSyncManager's rate limit
            try:
                started = time.perf_counter()
                self._ok(self._execute(env, "true"), "the command carrying the sync")
                push = time.perf_counter() - started
            finally:
                os.environ.pop("HERMES_FORCE_FILE_SYNC", None)
            files, big = self._seen(env, rel)
            started = time.perf_counter()
            self.run.release(env)  # sync back (download, compare, copy) and release the sandbox
            released = True
            back = time.perf_counter() - started
            return SyncResult(push, back, files, big)
        finally:
            if not released:
                self.run.release(env)
            tree.remove()

    def _seen(self, env: Any, rel: str) -> tuple[int, int]:
        """How many files of the tree, and how many bytes of big.bin, the sandbox holds."""
        candidates = ['"$HOME/.hermes"']
        base = getattr(self.run.provider, "cache_path_base", None)
        if isinstance(base, str) and base.strip():
            candidates.append(f'"$(eval echo {shlex.quote(base.strip())})"')
        q = shlex.quote(rel)
        script = (
            f'for r in {" ".join(candidates)}; do if [ -d "$r"/{q} ]; then '
            f'find "$r"/{q} -type f | wc -l; wc -c < "$r"/{q}/big.bin; exit 0; fi; done; echo 0; echo 0'
        )
        words = self._ok(self._execute(env, script), "counting synced files").get("output", "").split()
        return int(words[0]), int(words[1])

    def close(self) -> None:
        try:
            if self._env is not None:
                self.run.release(self._env)
        finally:
            self.run.close()


def concurrent_floods(target: Target, n: int, size: int) -> list[float]:
    """``n`` bounded-capture floods started together; each call's wall time in ms."""
    barrier = threading.Barrier(n)
    latencies: list[float] = [0.0] * n
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            barrier.wait(30)
            started = time.perf_counter()
            target.flood(size, bounded=True)
            latencies[i] = (time.perf_counter() - started) * 1000
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,), name=f"bench-flood-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CALL_TIMEOUT_S + GRACE_S)
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads):
        raise RuntimeError(f"{target.name}: {n} concurrent floods did not finish")
    return latencies

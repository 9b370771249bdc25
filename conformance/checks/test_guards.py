"""skip_container_guards: a backend may turn Hermes's approval prompts off only for a sandbox
that cannot reach the machine Hermes runs on.

The check writes a nonce file in a fresh directory of the host and asks the sandbox to read
it at the same absolute path, and to write a second file there; and it asks whether the
sandbox sees this machine's processes (the kit's own, by pid and start time).  A remote backend's sandboxes
hosted by a fake whose boxes are not isolated share this machine's files by the fake's doing,
so such a run cannot tell; a local backend's reach is its own.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import tempfile
from pathlib import Path

import pytest

from conformance.checks._support import not_applicable, out, run
from conformance.verdicts import UNVERIFIED_PREFIX


def _start_ticks(pid: int) -> str | None:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22): with its pid, it names
    that one process; a PID namespace of a sandbox shows another process, or none, at that pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _fake_isolates(kit) -> bool:
    world = getattr(getattr(kit, "fake", None), "world", None)
    return world is None or "isolation" in set(getattr(world, "capabilities", ()) or ())


@pytest.mark.clause("provider.skip-guards-isolated")
def test_guards_skipped_only_when_no_host_path_is_reachable(kit, env):
    if kit.provider.skip_container_guards is not True:
        not_applicable("skip_container_guards is false: Hermes keeps its approval prompts")
    # In the run's own tree, outside the environments' working directory (a local sandbox may bind that).
    host_dir = Path(tempfile.mkdtemp(prefix="kit-host-only-", dir=kit.workdir))
    try:
        planted, written = secrets.token_hex(12), secrets.token_hex(12)
        (host_dir / "planted").write_text(planted)
        d = shlex.quote(str(host_dir))
        me, started = os.getpid(), _start_ticks(os.getpid())
        text = out(
            run(
                env,
                f"cat {d}/planted 2>/dev/null; echo; mkdir -p {d} 2>/dev/null && "
                f"printf %s {written} > {d}/written 2>/dev/null; "
                f"echo; echo host-process:$(sed 's/^.*) //' /proc/{me}/stat 2>/dev/null | cut -d' ' -f20); true",
            )
        )
        back = host_dir / "written"
        reached = []
        if planted in text:
            reached.append(f"read the host file {host_dir}/planted")
        if back.exists() and back.read_text(errors="replace") == written:
            reached.append(f"wrote the host file {back}")
        if started and f"host-process:{started}" in text:
            reached.append(f"saw this machine's process {me} (the kit's own)")
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)
    if reached and kit.has("remote") and not _fake_isolates(kit):
        pytest.skip(
            f"{UNVERIFIED_PREFIX} (harness: the fake's boxes are not isolated from this machine, "
            "so a reachable host path is the fake's doing)"
        )
    assert not reached, (
        f"skip_container_guards is true, but the sandbox {' and '.join(reached)}: host paths are reachable, so "
        "Hermes would skip dangerous-command approval for commands that can change this machine's files"
    )

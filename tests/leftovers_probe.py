"""Run a command and report every process of it still running when it has exited.

    python tests/leftovers_probe.py [--private-tmp DIR [--keep PATH]...] [--private-home DIR] [--grace S] -- COMMAND...

The probe makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so
every process the command started, daemonised or not, stays its descendant.
After the command exits (and ``--grace`` seconds for processes that are
ending), it lists the descendants still alive, kills them so the test itself
leaves nothing, and prints one JSON line: ``{"returncode": N, "left": [...]}``.

With ``--private-tmp DIR`` (run it under ``unshare --mount``) DIR is bind
mounted over /tmp first, so everything the command writes to /tmp lands in
DIR, where the caller can list it without other processes' files in the way.
Each ``--keep PATH`` below /tmp (the project, its virtualenv) stays visible
where it is: it is bound onto a mount point made for it in DIR first.
``--private-home DIR`` lays an overlay over $HOME: the command sees the
user's home (and an interpreter installed there) where it always is, and
everything it writes there lands in DIR/upper instead.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z":
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--private-tmp")
    parser.add_argument("--private-home")
    parser.add_argument("--keep", action="append", default=[], help="a path below /tmp that stays visible")
    parser.add_argument("--grace", type=float, default=3.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.private_tmp or args.private_home:
        subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    if args.private_home:  # first: the user's home may lie under /tmp
        upper, work = os.path.join(args.private_home, "upper"), os.path.join(args.private_home, "work")
        os.makedirs(upper, exist_ok=True)
        os.makedirs(work, exist_ok=True)
        home = os.path.expanduser("~")
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={home},upperdir={upper},workdir={work}", home],
            check=True,
        )
    if args.private_tmp:
        for keep in args.keep:
            inside = os.path.relpath(os.path.realpath(keep), "/tmp")
            point = os.path.join(args.private_tmp, inside)
            os.makedirs(point, exist_ok=True)
            subprocess.run(["mount", "--bind", keep, point], check=True)
        subprocess.run(["mount", "--rbind", args.private_tmp, "/tmp"], check=True)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(json.dumps({"error": f"prctl failed: errno {ctypes.get_errno()}"}))
        return 2
    returncode = subprocess.call(command)
    ends = time.monotonic() + args.grace
    left = descendants(os.getpid())
    while left and time.monotonic() < ends:
        time.sleep(0.1)
        left = descendants(os.getpid())
    report = [{"pid": pid, "cmdline": _cmdline(pid)} for pid in left]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    while True:  # reap what was killed
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not descendants(os.getpid()):
            break
        time.sleep(0.05)
    sys.stdout.flush()
    print(json.dumps({"returncode": returncode, "left": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

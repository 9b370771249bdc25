"""The argv every command runs under, and the argv that kills one command.

DeepInfra's exec takes an argv, has no stdin channel and no per-command
cancel.  Each Hermes command therefore runs under a small bash launcher that

1. makes itself a process-group leader (``setsid`` when the service did not
   start it as one), so the command and every child it starts share a group
   that nothing else belongs to;
2. appends its run id, that group's id and the time it started (bash's
   ``$EPOCHREALTIME``) to ``/tmp/.hermes-runs.log`` (a builtin append: one
   short line per command, gone with the sandbox's /tmp at a stop), the way a
   second exec finds it: the killer below kills exactly that group, after
   checking that the process with that id started within a second of that
   time (pids get reused; a process's start time survives the command's own
   ``exec``);
3. gives the command its stdin.  Small stdin travels base64-encoded in extra
   argv elements and is decoded into a temp file; large stdin is staged raw
   under /workspace through the fs API first.  Either file is opened as fd 3
   and unlinked at once, and the command reads it as its stdin, so any bytes
   (binary, NUL, no trailing newline) arrive exactly.  Without stdin the
   command gets /dev/null.  A new sandbox's session bootstrap may carry
   Hermes's first file sync instead (a tar, base64 in the extra elements):
   it is unpacked while the bootstrap runs and the exec ends once both have
   (125 when the files could not be unpacked), so the first sync costs no
   call of its own and no time beyond the bootstrap's;
4. makes the backend's directories under /workspace when they are missing
   (Hermes's temp dir for the session snapshot, the transfer directory: a
   test builtin when they exist, so a new sandbox needs no exec of its own
   for them) and sets HOME to /workspace, the only directory that survives a
   stop;
5. runs the Hermes command text in its own shell, as ``bash -c`` would (no
   positional parameters, none of the launcher's variables, ``$0`` bash,
   line numbers from 1: the launcher is one line), so a command costs one
   bash, not two; the session bootstrap runs in a login bash (``bash -l -c``)
   as a child.  Without stdin every step is a shell builtin: no process
   starts beside the command's own.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass

from reference.deepinfra.settings import TEMP_DIR, TRANSFER_DIR, WORKSPACE

# Bytes at most this big (stdin, a sync archive) travel base64-encoded inside the exec's argv, in
# ARG_CHUNK pieces: one call instead of a file upload and an exec.  Larger ones are staged through the
# fs API.  The service's argv limits are unknown, so this stays far below Linux's 128 KiB per argument
# and 2 MiB in all.
INLINE_MAX = 64 * 1024
ARG_CHUNK = 32 * 1024

RUNS = "/tmp/.hermes-runs.log"  # "run id, group id, leader's start time" per command
# How each kind of launch gives the command its stdin (fd 3), or unpacks the files it carries.
_STDIN_STEPS = {
    "none": "exec 3</dev/null",
    "inline": "__f=$(mktemp /tmp/.hermes-stdin.XXXXXX) || exit 125; "
    'if ! printf %s "${@:2}" | base64 -d > "$__f"; then rm -f "$__f"; '
    'echo "deepinfra: could not decode stdin" >&2; exit 125; fi; exec 3<"$__f"; rm -f "$__f"',
    "file": 'if ! exec 3<"$2"; then echo "deepinfra: staged stdin $2 is missing" >&2; exit 125; fi; rm -f "$2"',
    # The files unpack while the session bootstrap runs; the exec ends when both have.
    "files": '{ printf %s "${@:2}" | base64 -d | tar -xf - -C / --no-same-owner || '
    '{ echo "deepinfra: could not unpack Hermes\'s files" >&2; exit 125; }; } & __u=$!; exec 3</dev/null',
}


def _script(stdin_step: str) -> str:
    """The launcher for one kind of launch, on one line (so the command's line numbers start at 1, as
    under ``bash -c``), with only that kind's step: the less bash parses, the less each command costs."""
    steps = [
        "__r=$1 __l=$2 __h=$3",
        "shift 3",
        # A group led by $$ exists only if $$ made it: kill -0 on it is a builtin test of leadership.
        'if ! kill -0 -- "-$$" 2>/dev/null && [ -z "${HERMES_RUN_GROUPED:-}" ] && command -v setsid >/dev/null 2>&1; '
        'then HERMES_RUN_GROUPED=1 exec setsid bash -c "$BASH_EXECUTION_STRING" bash "$__r" "$__l" "$__h" "$@"; fi',
        "unset HERMES_RUN_GROUPED",
        f'printf \'%s %s %s\\n\' "$__r" "$$" "${{EPOCHREALTIME:-}}" 2>/dev/null >> {RUNS}',
        stdin_step,
        f"[ -d {TEMP_DIR} ] && [ -d {TRANSFER_DIR} ] || mkdir -p {TEMP_DIR} {TRANSFER_DIR} 2>/dev/null",
        'export HOME="$__h"',
        'if [ "$__l" = 1 ]; then bash -l -c "$1" <&3 3<&-; __c=$?; '
        '[ -z "${__u:-}" ] || wait "$__u" || exit 125; exit $__c; fi',
        'set -- "$1"',
        "unset __r __l __h __f __u",
        'eval "shift; $1" <&3 3<&-',
    ]
    return "; ".join(steps)


LAUNCHERS = {kind: _script(step) for kind, step in _STDIN_STEPS.items()}

# The launcher's own failure before the command ran (stdin or files it could not set up).
LAUNCH_FAILED = 125

# Exit 0: the group was killed; 3: no such run (it ended, or never started); 4: bad record.
KILLER = r"""
n=0
until record=$(grep -m1 "^$1 " @RUNS@ 2>/dev/null); do
  [ "$n" -ge "${2:-40}" ] && exit 3
  sleep 0.05; n=$((n+1))
done
read -r _ pg started <<< "$record"
case $pg in ''|*[!0-9]*) exit 4 ;; esac
stat=$(cat "/proc/$pg/stat" 2>/dev/null) || exit 3
read -r -a fields <<< "${stat##*) }"
if [ -n "$started" ]; then
  hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
  awk -v ticks="${fields[19]:-0}" -v hz="${hz:-100}" -v at="$started" \
    '$1 == "btime" { d = $2 + ticks / hz - at; bad = (d < -1 || d > 1) } END { exit bad }' /proc/stat || exit 3
fi
kill -KILL -- "-$pg" 2>/dev/null || kill -KILL "$pg" 2>/dev/null
exit 0
""".replace("@RUNS@", RUNS)


def new_run_id() -> str:
    return "hr-" + secrets.token_hex(8)


@dataclass(frozen=True)
class Launch:
    run_id: str
    argv: list[str]
    staged: bytes | None = None  # stdin to PUT at ``staged_path`` before the exec
    staged_path: str | None = None


def launch(cmd: str, *, login: bool, stdin: bytes | None, files: bytes | None = None) -> Launch:
    """The argv running ``cmd`` under the launcher with ``stdin``, or, with ``files`` (a tar of at most
    INLINE_MAX bytes, for a login command without stdin: the session bootstrap), unpacking those files
    beside it."""
    run_id = new_run_id()

    def argv(kind: str, *extra: str) -> list[str]:
        return ["bash", "-c", LAUNCHERS[kind], "bash", run_id, "1" if login else "0", WORKSPACE, cmd, *extra]

    if files is not None:
        if stdin is not None or not login or len(files) > INLINE_MAX:
            raise ValueError("files ride only on a session bootstrap (login, no stdin), inline")
        return Launch(run_id, argv("files", *inline_args(files)))
    if stdin is None:
        return Launch(run_id, argv("none"))
    if len(stdin) <= INLINE_MAX:
        return Launch(run_id, argv("inline", *inline_args(stdin)))
    path = f"{TRANSFER_DIR}/stdin-{run_id}"
    return Launch(run_id, argv("file", path), staged=stdin, staged_path=path)


def inline_args(data: bytes) -> list[str]:
    """``data`` base64-encoded in argv pieces; ``printf '%s' "$@" | base64 -d`` gives it back."""
    encoded = base64.b64encode(data).decode("ascii")
    return [encoded[i : i + ARG_CHUNK] for i in range(0, len(encoded), ARG_CHUNK)]


def killer(run_id: str, *, wait_ticks: int = 40) -> list[str]:
    """The argv that kills run ``run_id``'s process group (waiting ``wait_ticks`` x 50 ms for it to start)."""
    return ["bash", "-c", KILLER, "hermes-kill", run_id, str(wait_ticks)]

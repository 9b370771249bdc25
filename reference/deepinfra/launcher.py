"""The argv every command runs under, and the argv that kills one command.

DeepInfra's exec takes an argv, has no stdin channel and no per-command
cancel.  Each Hermes command therefore runs under a small bash launcher that

1. makes itself a process-group leader (``setsid`` when the service did not
   start it as one), so the command and every child it starts share a group
   that nothing else belongs to;
2. records that group id in ``/tmp/.hermes-runs/<run id>``, the way a second
   exec finds it (the killer below kills exactly that group, after checking
   the group leader is still this run's launcher, since pids get reused);
3. gives the command its stdin.  Small stdin travels base64-encoded in extra
   argv elements and is decoded into a temp file; large stdin is staged raw
   under /workspace through the fs API first.  Either file is opened as fd 3
   and unlinked at once, and the command reads it as its stdin, so any bytes
   (binary, NUL, no trailing newline) arrive exactly.  Without stdin the
   command gets /dev/null;
4. makes the backend's directories under /workspace when they are missing
   (Hermes's temp dir for the session snapshot, the transfer directory: a
   test builtin when they exist, so a new sandbox needs no exec of its own
   for them), sets HOME to /workspace, the only directory that survives a
   stop, and runs ``bash -c`` (or ``bash -l -c``) with the Hermes command text;
5. empties the group record (a builtin, no extra process: empty means
   "ended") and exits with the command's status.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass

from reference.deepinfra.settings import TEMP_DIR, TRANSFER_DIR, WORKSPACE

# stdin at most this big travels inside the argv; larger stdin is staged through the fs API.
# The service's argv limits are unknown, so the inline part stays well below Linux's 128 KiB per argument.
INLINE_STDIN_MAX = 24 * 1024
ARG_CHUNK = 32 * 1024

LAUNCHER = r"""
run=$1 login=$2 home=$3 mode=$4 cmd=$5
shift 5
read -r -a st < "/proc/$$/stat" 2>/dev/null
if [ "${st[4]:-$$}" != "$$" ] && [ -z "${HERMES_RUN_GROUPED:-}" ] && command -v setsid >/dev/null 2>&1; then
  HERMES_RUN_GROUPED=1 exec setsid bash -c "$BASH_EXECUTION_STRING" "$0" "$run" "$login" "$home" "$mode" "$cmd" "$@"
fi
unset HERMES_RUN_GROUPED
[ -d /tmp/.hermes-runs ] || mkdir -p /tmp/.hermes-runs 2>/dev/null
printf '%s\n' "$$" 2>/dev/null > "/tmp/.hermes-runs/$run"
case $mode in
  inline)
    f=$(mktemp /tmp/.hermes-stdin.XXXXXX) || exit 125
    if ! printf '%s' "$@" | base64 -d > "$f"; then
      rm -f "$f"; echo "deepinfra: could not decode stdin" >&2; exit 125
    fi
    exec 3<"$f"; rm -f "$f" ;;
  file)
    if ! exec 3<"$1"; then echo "deepinfra: staged stdin $1 is missing" >&2; exit 125; fi
    rm -f "$1" ;;
  *) exec 3</dev/null ;;
esac
[ -d @TEMP@ ] && [ -d @TRANSFER@ ] || mkdir -p @TEMP@ @TRANSFER@ 2>/dev/null
export HOME="$home"
if [ "$login" = 1 ]; then bash -l -c "$cmd" <&3 3<&-; else bash -c "$cmd" <&3 3<&-; fi
rc=$?
: 2>/dev/null > "/tmp/.hermes-runs/$run"
exit $rc
""".replace("@TEMP@", TEMP_DIR).replace("@TRANSFER@", TRANSFER_DIR)

# Exit 0: the group was killed; 3: no such run (it ended, or never started); 4: bad record.
KILLER = r"""
f=/tmp/.hermes-runs/$1
n=0
while [ ! -s "$f" ]; do
  [ -e "$f" ] && exit 3
  [ "$n" -ge "${2:-40}" ] && exit 3
  sleep 0.05; n=$((n+1))
done
pg=$(cat "$f" 2>/dev/null)
case $pg in ''|*[!0-9]*) exit 4 ;; esac
tr '\0' '\n' < "/proc/$pg/cmdline" 2>/dev/null | grep -qxF -- "$1" || exit 3
kill -KILL -- "-$pg" 2>/dev/null || kill -KILL "$pg" 2>/dev/null
rm -f "$f"
exit 0
"""


def new_run_id() -> str:
    return "hr-" + secrets.token_hex(8)


@dataclass(frozen=True)
class Launch:
    run_id: str
    argv: list[str]
    staged: bytes | None = None  # stdin to PUT at ``staged_path`` before the exec
    staged_path: str | None = None


def launch(cmd: str, *, login: bool, stdin: bytes | None) -> Launch:
    """The argv running ``cmd`` under the launcher with ``stdin``."""
    run_id = new_run_id()
    head = ["bash", "-c", LAUNCHER, "hermes-run", run_id, "1" if login else "0", WORKSPACE]
    if stdin is None:
        return Launch(run_id, [*head, "none", cmd])
    if len(stdin) <= INLINE_STDIN_MAX:
        encoded = base64.b64encode(stdin).decode("ascii")
        chunks = [encoded[i : i + ARG_CHUNK] for i in range(0, len(encoded), ARG_CHUNK)]
        return Launch(run_id, [*head, "inline", cmd, *chunks])
    path = f"{TRANSFER_DIR}/stdin-{run_id}"
    return Launch(run_id, [*head, "file", cmd, path], staged=stdin, staged_path=path)


def killer(run_id: str, *, wait_ticks: int = 40) -> list[str]:
    """The argv that kills run ``run_id``'s process group (waiting ``wait_ticks`` x 50 ms for it to start)."""
    return ["bash", "-c", KILLER, "hermes-kill", run_id, str(wait_ticks)]

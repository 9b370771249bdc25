"""A box's machine: its base image, its tools layer, its ``agent`` account and what provisioning installs.

A box whose driver allows a writable root of layers (``hermes-box`` run as root, with user
namespaces) is a machine of its own: its ``/`` is its *tools layer* (``BoxDir.tools``) over the
base that ``BASE_IMAGE`` names, with ``/data`` apart.  box.json records it as ``"machine":
{"base": BASE_IMAGE}``; a box without that entry (made unprivileged) keeps the read-only system
directories and runs its commands as its root.

- ``host``: the host's system directories and package state (``isolation.rootfs.host_base``);
- a directory: a root file system (``/usr``, ``/etc``, ``/bin/sh``), e.g. made by mmdebstrap;
- a tarball (``.tar``, ``.tar.gz``, ``.tar.xz``, ``.tar.zst``): extracted once, as root with its
  owners, into ``data_dir/bases/NAME-HASH`` and used as a directory.

Provisioning (``provision``) runs inside the started box as its root, one shell script a step, each
idempotent (it checks before it installs), each logged to ``RunDir.provision_log(step)``: the
``agent`` account (uid and gid 1000 in the box: ``/etc/passwd``, passwordless sudo, sudo itself
when the base lacks it), then what box.env asks: ``NODE_MAJOR``, ``INSTALL_NEOVIM``,
``INSTALL_HERMES``, ``INSTALL_CLAUDE``, ``INSTALL_CODEX``, ``INSTALL_EXECUTOR``.  A step that fails
raises a BoxError naming the step, the end of its log and the fix; one that succeeds with a reservation
(sudo not installable, Executor's native release not fetched) is a warning.  Then the installed
versions are written to ``BoxDir.tools_versions`` (JSON ``{tool: version}``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isolation import BoxUser
from isolation.rootfs import Base, ToolsLayer, directory_base, host_base, remove_tree, write_masks
from reference.box_lite import hb
from reference.box_lite.errors import BadInput, BoxError
from reference.box_lite.paths import AGENT_ID, BoxDir, BoxHome
from reference.box_lite.records import json_bytes, publish_atomic
from reference.box_lite.settings import Settings

if TYPE_CHECKING:
    from reference.box_lite.boxes import BoxManager

AGENT = BoxUser(AGENT_ID, AGENT_ID, (AGENT_ID,))
HOST = "host"
STEP_TIMEOUT_S = 1800.0
_TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.zst", ".tar.bz2")
Note = Callable[[str], None]


def base_image(home: BoxHome, value: str) -> Base:
    """The base ``BASE_IMAGE`` names (a tarball is extracted on first use); BadInput when unusable."""
    if value == HOST:
        return host_base()
    path = Path(value)
    if path.is_dir():
        _check_root(path, value)
        return directory_base(path)
    if path.is_file() and path.name.endswith(_TARBALL_SUFFIXES):
        return directory_base(_extracted(home, path))
    raise BadInput(
        f"BASE_IMAGE={value} is not usable",
        "it is neither host, nor a directory, nor a tarball (.tar, .tar.gz, .tar.xz, .tar.zst) on this machine",
        "build a root file system with mmdebstrap (see docs/box-lite.md) and name it in box.env, or write host",
    )


def _check_root(path: Path, shown: str) -> None:
    missing = [p for p in ("usr", "etc", "bin/sh") if not (path / p).exists()]
    if missing:
        raise BadInput(
            f"BASE_IMAGE={shown} is no root file system",
            f"it has no {', '.join('/' + m for m in missing)}",
            "build one with mmdebstrap (see docs/box-lite.md), or write BASE_IMAGE=host",
        )


def _extracted(home: BoxHome, tarball: Path) -> Path:
    """The directory ``tarball`` is extracted to (once per file content and name: its size and mtime)."""
    st = tarball.stat()
    key = hashlib.sha256(f"{tarball.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:12]
    stem = tarball.name.split(".")[0] or "base"
    where = home.data_dir / "bases" / f"{stem}-{key}"
    if where.is_dir():
        return where
    partial = where.with_name(where.name + ".partial")
    remove_tree(partial)
    partial.mkdir(mode=0o755, parents=True)
    done = subprocess.run(
        ["tar", "-x", "-p", "--numeric-owner", "-f", str(tarball), "-C", str(partial)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        remove_tree(partial)
        raise BadInput(
            f"BASE_IMAGE={tarball} could not be extracted",
            (done.stderr.strip().splitlines() or ["tar failed"])[-1],
            "check the file (tar -tf), or build the base again with mmdebstrap",
        )
    try:
        _check_root(partial, str(tarball))
    except BadInput:
        remove_tree(partial)
        raise
    partial.rename(where)
    return where


def tools_layer(box: BoxDir) -> ToolsLayer:
    return ToolsLayer(box.tools)


def shared_masks(home: BoxHome) -> Path:
    """Masks of the ``host`` base's large directories, made once and copied into each new tools layer."""
    return home.data_dir / "bases" / "host-masks"


def make_tools(home: BoxHome, box: BoxDir, base: Base, uid_base: int, *, rescan: bool = False) -> None:
    """A new, empty tools layer for box ``box`` over ``base`` (any former one removed).

    ``rescan``: make the shared masks of the host base again first (``repair``)."""
    masks = None
    if not base.whole:
        masks = shared_masks(home)
        if rescan or not (masks / ".complete").exists():
            write_masks(base, masks, uid_base)
    remove_tree(box.tools)
    tools_layer(box).make(base, uid_base, masks=masks)


def agent_ids(uid_base: int) -> tuple[int, int]:
    """The host ids of the box's agent (what /data's files belong to)."""
    return uid_base + AGENT_ID, uid_base + AGENT_ID


# -- provisioning ---------------------------------------------------------------------------------------
_PRELUDE = r"""
set -eu
export DEBIAN_FRONTEND=noninteractive NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false
updated=""
apt_install() {  # the base's package lists first; fetched again once if an install fails
    if ! apt-get install -y --no-install-recommends "$@"; then
        [ -z "$updated" ] || return 1
        echo "hermes-box: apt-get install failed; updating the package lists and retrying"
        apt-get update -q && updated=1 && apt-get install -y --no-install-recommends "$@"
    fi
}
npm_install() {  # a global npm package unless its command is already there
    command_name=$1; package=$2
    if command -v "$command_name" >/dev/null 2>&1; then echo "$command_name is already installed"; return 0; fi
    if ! command -v npm >/dev/null 2>&1; then
        echo "error: npm is not installed in the box — set NODE_MAJOR in box.env" \
            "(Node.js from the base's packages), then hermes-box repair" >&2
        exit 2
    fi
    npm install -g --no-fund --no-audit --loglevel=error "$package"
}
"""

_ACCOUNT = r"""
# The box's own shadow files and sudoers (a host base's are hidden from the box: they are the host's secrets).
if [ ! -e /etc/shadow ]; then
    awk -F: '{print $1 ":*:20000:0:99999:7:::"}' /etc/passwd > /etc/shadow
    chmod 640 /etc/shadow; chgrp shadow /etc/shadow 2>/dev/null || true
fi
if [ ! -e /etc/gshadow ]; then
    awk -F: '{print $1 ":*::" $4}' /etc/group > /etc/gshadow
    chmod 640 /etc/gshadow; chgrp shadow /etc/gshadow 2>/dev/null || true
fi
other=$(getent passwd 1000 | cut -d: -f1 || true)
if [ -n "$other" ] && [ "$other" != agent ]; then userdel "$other"; fi
other=$(getent group 1000 | cut -d: -f1 || true)
if [ -n "$other" ] && [ "$other" != agent ]; then groupdel "$other"; fi
getent group agent >/dev/null || groupadd -g 1000 agent
getent passwd agent >/dev/null || useradd -u 1000 -g 1000 -M -d /home/agent -s /bin/bash -c "hermes-box agent" agent
grep -q "[[:space:]]$(hostname)\$" /etc/hosts 2>/dev/null || echo "127.0.1.1 $(hostname)" >> /etc/hosts
if ! command -v sudo >/dev/null 2>&1; then
    echo "hermes-box: the base has no sudo: installing it"
    apt_install sudo || { echo "warning: sudo could not be installed (no network or no package lists?)" >&2; exit 3; }
fi
if [ ! -e /etc/sudoers ]; then
    printf '%s\n' 'Defaults env_reset' \
        'Defaults secure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"' \
        'root ALL=(ALL:ALL) ALL' '@includedir /etc/sudoers.d' > /etc/sudoers
    chmod 440 /etc/sudoers
fi
mkdir -p /etc/sudoers.d && chmod 750 /etc/sudoers.d
echo 'agent ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/hermes-box-agent
chmod 440 /etc/sudoers.d/hermes-box-agent
"""

_NODE = r"""
want={major}
have=$(node --version 2>/dev/null | sed 's/^v//; s/\..*//' || true)
if [ "$have" = "$want" ]; then echo "Node.js $(node --version) is already installed"; exit 0; fi
pick() {{  # the newest version of the nodejs package whose major is $want
    apt-cache madison nodejs 2>/dev/null | awk -F'|' -v m="$want" \
        '{{v=$2; gsub(/ /,"",v); s=v; sub(/^[0-9]+:/,"",s); split(s,p,"."); if (p[1]==m) {{print v; exit}}}}'
}}
version=$(pick)
if [ -z "$version" ]; then apt-get update -q >/dev/null && updated=1; version=$(pick); fi
if [ -z "$version" ]; then
    offered=$(apt-cache madison nodejs 2>/dev/null | awk -F'|' '{{gsub(/ /,"",$2); print $2}}' | tr '\n' ' ')
    echo "error: Node.js $want is not in the base's package sources (they offer nodejs: ${{offered:-none}})" \
        "— set NODE_MAJOR to one of those majors, or use a BASE_IMAGE whose sources have Node.js $want" >&2
    exit 2
fi
apt_install "nodejs=$version"
command -v npm >/dev/null 2>&1 || apt_install npm
node --version
"""

_NEOVIM = r"""
if command -v nvim >/dev/null 2>&1; then echo "Neovim is already installed"; exit 0; fi
apt_install neovim
"""

_HERMES = r"""
if [ -x /opt/hermes-agent/bin/hermes ]; then echo "hermes-agent is already installed"; exit 0; fi
if ! python3 -m venv /opt/hermes-agent 2>/dev/null; then
    apt_install python3-venv && rm -rf /opt/hermes-agent && python3 -m venv /opt/hermes-agent
fi
/opt/hermes-agent/bin/pip install --quiet --disable-pip-version-check hermes-agent
ln -sf /opt/hermes-agent/bin/hermes /usr/local/bin/hermes
"""

_EXECUTOR = r"""
npm_install executor executor
if ! timeout 120 executor --version </dev/null; then
    echo "warning: Executor's npm launcher is installed but could not fetch or run its native release" \
        "(it downloads it on first run, from outside the package registries);" \
        "run executor once where that download is allowed" >&2
    exit 3
fi
"""

_VERSIONS = r"""
for tool in TOOLS; do
    path=$(command -v "$tool" 2>/dev/null) || continue
    case $tool in
        executor) line=$(timeout 10 executor --version </dev/null 2>/dev/null | head -n1) ;;
        *) line=$(timeout 20 "$tool" --version </dev/null 2>/dev/null | head -n1) ;;
    esac
    printf '%s\t%s\n' "$tool" "${line:-installed at $path}"
done
""".replace("TOOLS", " ".join(argv[0] for _, argv in hb.TOOLS))


@dataclass(frozen=True)
class Step:
    """One provisioning step: its name, its script (after the prelude) and what it installs."""

    name: str
    script: str
    what: str


def steps(settings: Settings) -> list[Step]:
    """The steps box.env asks for, in order (the account always)."""
    chosen = [Step("account", _ACCOUNT, "the agent account and its sudo")]
    if settings.node_major is not None:
        chosen.append(Step("node", _NODE.format(major=settings.node_major), f"Node.js {settings.node_major}"))
    if settings.install_neovim:
        chosen.append(Step("neovim", _NEOVIM, "Neovim"))
    if settings.install_hermes:
        chosen.append(Step("hermes", _HERMES, "hermes-agent from PyPI"))
    if settings.install_claude:
        chosen.append(Step("claude", "npm_install claude @anthropic-ai/claude-code\n", "Claude Code"))
    if settings.install_codex:
        chosen.append(Step("codex", "npm_install codex @openai/codex\n", "Codex"))
    if settings.install_executor:
        chosen.append(Step("executor", _EXECUTOR, "Executor"))
    return chosen


WARNING_EXIT = 3  # a step's exit code for "done, with a reservation" (said on its stderr)


def provision(manager: BoxManager, name: str, note: Note | None = None) -> list[str]:
    """Run every step in the running box ``name`` as its root; the warnings (BoxError on a failure).

    Each step's output goes to its log under the box's run directory; on a terminal a line per step
    says what is being installed and where its log is."""
    say = note if note is not None else (_stderr_note if sys.stderr.isatty() else (lambda _: None))
    run = manager.home.run(name)
    run.provision_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    warnings = []
    for step in steps(manager.settings):
        log = run.provision_log(step.name)
        say(f"provisioning {name}: {step.what} (log: {log})")
        code = _run_step(manager, name, _PRELUDE + step.script, log)
        if code == WARNING_EXIT:
            warnings.append(f"{step.name}: {_last_line(log, 'warning:')}")
            say(f"warning: {warnings[-1]}")
        elif code != 0:
            why = _last_line(log, "error:") or f"the step exited {code}"
            raise BoxError(
                f"provisioning step {step.name} of box {name} failed ({step.what})",
                why,
                f"see {log}; fix the cause (box.env: {manager.home.settings_file}), then hermes-box repair {name}",
            )
    record_versions(manager, name)
    return warnings


def _stderr_note(text: str) -> None:
    print(f"hermes-box: {text}", file=sys.stderr, flush=True)


def _run_step(manager: BoxManager, name: str, script: str, log: Path) -> int:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with manager.popen(
            name, ["sh", "-c", script], root=True, cwd="/", stdin=subprocess.DEVNULL, stdout=fd, stderr=fd
        ) as command:
            try:
                return command.wait(STEP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                command.kill()
                command.wait()
                os.write(fd, f"error: the step took more than {STEP_TIMEOUT_S:.0f} s and was stopped\n".encode())
                return 124
    finally:
        os.close(fd)


def _last_line(log: Path, prefix: str) -> str:
    """The last line of ``log`` starting with ``prefix`` (without it), else its last line."""
    try:
        lines = [ln.strip() for ln in log.read_text("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    marked = [ln for ln in lines if ln.startswith(prefix)]
    if marked:
        return marked[-1][len(prefix) :].strip()
    return lines[-1] if lines else ""


def record_versions(manager: BoxManager, name: str) -> dict[str, str]:
    """The tools installed in box ``name`` and their versions, written to ``BoxDir.tools_versions``."""
    with manager.popen(
        name, ["sh", "-c", _VERSIONS], root=True, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    ) as command:
        assert command.stdout is not None
        text = command.stdout.read().decode("utf-8", "replace")
        command.wait()
    versions = {}
    for line in text.splitlines():
        tool, _, version = line.partition("\t")
        if tool and version:
            versions[tool] = version.strip()
    box = manager.home.box(name)
    publish_atomic(box.tools_versions, json_bytes(versions), mode=0o644)
    return versions


def installed_versions(box: BoxDir) -> dict[str, Any]:
    """What ``record_versions`` last wrote for the box ({} when never)."""
    try:
        data = json.loads(box.tools_versions.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

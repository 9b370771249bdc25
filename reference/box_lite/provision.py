"""A box's managed assets: what Box Lite puts in a box and refreshes on ``repair``, never touching /data's own content.

- ``/etc/hermes-box.env``: the settings in effect (``Settings.render()``), kept
  on the host at ``managed/hermes-box.env`` and shown read-only inside (the
  isolation engine adds it to the read-only /etc).  It is rewritten in place,
  so a running box sees a refresh at once;
- the managed block of ``~/.profile`` and ``~/.bashrc`` (between the marker
  lines below): the box's name in ``HERMES_BOX`` and in the prompt, and a login
  shell that reads ``.bashrc``.  Anything outside the block is the user's and is
  kept byte for byte;
- ``~/workspace`` (made when missing, never emptied);
- ``/run/hermes-box`` (``managed/inside`` on the host, read-only inside): ``hb`` and the
  modules it runs (``hb.py``, ``mcp_probe.py``, copied from this package), which the
  box's daemon also puts at ``/usr/local/bin/hb``, and the daemon's ``hb.sock``.

The home directory is ``data/home`` on the host, which commands in the box can
change at will (it is their /home/agent), so everything here is done through
directory descriptors that never follow a symbolic link: a box cannot turn a
refresh into a write elsewhere on the host.  Files get the box's root ids.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path, PurePosixPath

from reference.box_lite.errors import BoxError
from reference.box_lite.paths import HOME_INSIDE, WORKSPACE_INSIDE, BoxDir

BEGIN = "# >>> hermes-box managed block (refreshed by `hermes-box repair`; edits inside it are replaced) >>>"
END = "# <<< hermes-box managed block <<<"

_WORKSPACE = str(PurePosixPath(WORKSPACE_INSIDE).relative_to(HOME_INSIDE))  # ~/workspace, in the home
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def profile_block(name: str) -> str:
    return "\n".join(
        [
            BEGIN,
            f"export HERMES_BOX={name}",
            'if [ -n "$BASH_VERSION" ] && [ -f "$HOME/.bashrc" ] && [ -z "$HERMES_BOX_BASHRC" ]; then',
            '    . "$HOME/.bashrc"',
            "fi",
            END,
        ]
    )


def bashrc_block(name: str) -> str:
    return "\n".join(
        [
            BEGIN,
            "HERMES_BOX_BASHRC=1",
            f"export HERMES_BOX={name}",
            f"PS1='[box {name}] \\w\\$ '",
            END,
        ]
    )


def with_block(text: str, block: str) -> str:
    """``text`` with its managed block replaced by ``block`` (appended when it has none)."""
    lines = text.splitlines(keepends=True)
    found: tuple[int, int] | None = None  # the last BEGIN..END pair with no other BEGIN inside
    start = None
    for i, line in enumerate(lines):
        if line.rstrip("\n") == BEGIN:
            start = i
        elif line.rstrip("\n") == END and start is not None:
            found, start = (start, i), None
    if found is not None:
        return "".join(lines[: found[0]]) + block + "\n" + "".join(lines[found[1] + 1 :])
    if text and not text.endswith("\n"):
        text += "\n"
    return text + ("\n" if text else "") + block + "\n"


def _open_dir(name: str, parent: int | None, uid: int, gid: int, shown: str, box: str, mode: int = 0o755) -> int:
    """A descriptor of directory ``name`` (made when missing) that is no symbolic link; ``shown`` is its
    path inside box ``box``, for the error when something else stands there."""
    try:
        os.mkdir(name, mode, dir_fd=parent)
        made = True
    except FileExistsError:
        made = False
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        what = "a symbolic link" if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode) else "not a directory"
        raise BoxError(
            f"cannot refresh the box's managed files: {shown} is {what}",
            f"Box Lite keeps {shown} a directory of the box's own and never follows a link there",
            f"move it aside (`hermes-box exec {box} -- mv {shown} {shown}.old`), then `hermes-box repair {box}`",
        ) from None
    if made and os.geteuid() == 0:
        os.fchown(fd, uid, gid)
    return fd


def _read_regular(name: str, folder: int) -> str:
    """The text of a regular file ``name`` in ``folder``; '' if missing or anything else (it is replaced)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "surrogateescape")
    finally:
        os.close(fd)


def _replace(name: str, folder: int, text: str, uid: int, gid: int, mode: int = 0o644) -> None:
    """Publish ``text`` as ``name`` in ``folder`` (a new file renamed over the old, link or not)."""
    tmp = f".{name}.hermes-box.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=folder)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
    try:
        os.write(fd, text.encode("utf-8", "surrogateescape"))
        if os.geteuid() == 0:
            os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)


def write_env_file(path: Path, text: str) -> None:
    """The host copy of /etc/hermes-box.env, rewritten in place (same inode: a running box sees it)."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        data = text.encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)


def provision(box: BoxDir, name: str, env_text: str, uid: int, gid: int) -> None:
    """Write or refresh every managed asset of ``box`` (see the module docstring)."""
    write_env_file(box.env_file, env_text)
    provision_inside(box)
    data = os.open(box.data, _DIR_FLAGS)
    try:
        home = _open_dir(box.home.name, data, uid, gid, HOME_INSIDE, name)  # /home/agent, a directory of /data
        try:
            os.close(_open_dir(_WORKSPACE, home, uid, gid, WORKSPACE_INSIDE, name))
            for filename, block in ((".profile", profile_block(name)), (".bashrc", bashrc_block(name))):
                _replace(filename, home, with_block(_read_regular(filename, home), block), uid, gid)
        finally:
            os.close(home)
    finally:
        os.close(data)


HB_MODULES = ("hb.py", "mcp_probe.py")
HB_LAUNCHER = (
    "#!/bin/sh\n"
    "# hermes-box managed: the box helper (see /run/hermes-box/hb.py)\n"
    'exec python3 -I -S /run/hermes-box/hb.py "$@"\n'
)


def provision_inside(box: BoxDir) -> None:
    """Write ``managed/inside`` (see the module): host files the box sees read-only, so written plainly."""
    folder = box.inside
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    here = Path(__file__).parent
    files = {name: (here / name).read_text("utf-8") for name in HB_MODULES}
    files["hb"] = HB_LAUNCHER
    for name, text in files.items():
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text, "utf-8")
        tmp.chmod(0o755 if name == "hb" else 0o644)
        os.replace(tmp, folder / name)


def own_tree(root: Path, uid: int, gid: int) -> None:
    """Give every entry under ``root`` (itself included) the box's ids; links are not followed.

    Needed after ``populate`` (a restore writes as this process) and only as root
    (unprivileged, the box's root is the caller, who owns them already).
    """
    if os.geteuid() != 0:
        return
    os.lchown(root, uid, gid)
    for folder, dirs, files in os.walk(root):
        for entry in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.lchown(os.path.join(folder, entry), uid, gid)

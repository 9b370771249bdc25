"""Archives built by hand (tar and gpg as a user would run them) and trees compared by content."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
from pathlib import Path

PASSPHRASE = "correct horse battery staple"
MANIFEST = {"format": 1, "kind": "box", "name": "alpha", "created_at": "2026-01-01T00:00:00Z", "tools": {}}


def gpg_encrypt(plain: bytes, out: Path, home: Path, passphrase: str = PASSPHRASE) -> None:
    """``gpg --symmetric --cipher-algo AES256`` as the issue states it, the passphrase on stdin (fd 0)."""
    home.mkdir(mode=0o700, exist_ok=True)
    src = out.with_suffix(".plain")
    src.write_bytes(plain)
    try:
        subprocess.run(
            [*_gpg(home), "--symmetric", "--cipher-algo", "AES256", "--output", str(out), str(src)],
            input=passphrase.encode() + b"\n",
            check=True,
            capture_output=True,
        )
    finally:
        src.unlink()
    _stop_agent(home)


def gpg_decrypt(archive: Path, home: Path, passphrase: str = PASSPHRASE) -> bytes:
    """``gpg --batch --pinentry-mode loopback --passphrase-fd 0 --decrypt ARCHIVE``, the passphrase on stdin."""
    home.mkdir(mode=0o700, exist_ok=True)
    proc = subprocess.run(
        [*_gpg(home), "--decrypt", str(archive)],
        input=passphrase.encode() + b"\n",
        capture_output=True,
    )
    _stop_agent(home)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


def _gpg(home: Path) -> list[str]:
    return ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase-fd", "0"]


def _stop_agent(home: Path) -> None:
    """gpg run this way may start a gpg-agent for the homedir; a test leaves no process behind."""
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)


def targz(*members: tuple[tarfile.TarInfo, bytes | None], manifest: dict | bytes | None = MANIFEST) -> bytes:
    """A tar.gz with ``manifest`` first (unless None) and then ``members``, exactly as given."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        if manifest is not None:
            raw = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
            tar.addfile(file_info("manifest.json", len(raw)), io.BytesIO(raw))
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file_info(name: str, size: int = 0, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, mode
    return info


def typed(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def data_file(name: str, content: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    return file_info(name, len(content), mode), content


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root``: (type, mode, content hash or link target), for comparing trees."""
    found: dict[str, tuple] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(dirpath, name)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[rel] = ("file", stat.S_IMODE(st.st_mode), digest)
    return found


def sample_tree(root: Path) -> Path:
    """A small tree with what an archive must keep: modes, an empty dir, links, a hard link, binary data."""
    (root / "home" / "workspace" / "sub").mkdir(parents=True)
    (root / "home" / "workspace" / "f").write_text("precious\n")
    script = root / "home" / "workspace" / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o750)
    secret = root / "home" / ".secret"
    secret.write_bytes(os.urandom(70_000))
    secret.chmod(0o600)
    (root / "empty").mkdir(mode=0o711)
    (root / "empty").chmod(0o711)
    (root / "home" / "workspace" / "link").symlink_to("f")
    (root / "home" / "up").symlink_to("workspace/sub")
    os.link(root / "home" / "workspace" / "f", root / "home" / "hard")
    return root


def plaintext_files(root: Path, needle: bytes) -> list[Path]:
    """Files under ``root`` holding ``needle`` (a plaintext marker), skipping unreadable ones."""
    hits = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            try:
                if not path.is_symlink() and needle in path.read_bytes():
                    hits.append(path)
            except OSError:
                continue
    return hits

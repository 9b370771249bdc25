"""The passphrase shows nowhere: not in repr, errors or output, nor in gpg's argv or environment."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import pty
import select
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

import archives
from tests.archives.conftest import gpg_children
from tests.archives.craft import sample_tree

SECRET = "Zq9-unique-secret-passphrase-4411"


def test_repr_str_and_format_hide_the_value():
    secret = archives.Passphrase(SECRET)
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r}", f"{[secret]}"):
        assert SECRET not in shown and "***" in shown
    assert secret.reveal() == SECRET.encode()


def test_a_passphrase_cannot_be_pickled():
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(archives.Passphrase(SECRET))


@pytest.mark.parametrize("bad", ["", "two\nlines", "nul\0byte"])
def test_an_unusable_passphrase_is_refused_without_showing_it(bad: str):
    with pytest.raises(archives.PassphraseUnavailable) as raised:
        archives.Passphrase(bad)
    assert (bad not in str(raised.value)) or not bad


def test_the_environment_variable_is_used_when_set():
    assert archives.Passphrase.from_env(environ={"BOX_PASSPHRASE": SECRET}) == archives.Passphrase(SECRET)
    assert archives.Passphrase.from_env(environ={"BOX_PASSPHRASE": ""}) is None
    assert archives.Passphrase.from_env(environ={}) is None


def test_without_the_variable_or_a_terminal_the_error_says_how_to_give_one():
    env = {k: v for k, v in os.environ.items() if k != "BOX_PASSPHRASE"}
    proc = subprocess.run(
        [sys.executable, "-c", "from archives import Passphrase; Passphrase.obtain()"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,  # no controlling terminal
        timeout=60,
    )
    assert proc.returncode != 0
    assert "PassphraseUnavailable" in proc.stderr
    assert "set BOX_PASSPHRASE in the environment for unattended use, or run on a terminal" in proc.stderr


def test_the_prompt_does_not_echo_and_asks_twice_when_confirming():
    script = (
        "import hashlib; from archives import Passphrase; "
        "p = Passphrase.obtain(confirm=True); print('digest', hashlib.sha256(p.reveal()).hexdigest(), p)"
    )
    env = {k: v for k, v in os.environ.items() if k != "BOX_PASSPHRASE"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty
        os.execve(sys.executable, [sys.executable, "-c", script], env)
    output = b""
    try:
        for prompt in (b"Passphrase: ", b"Repeat the passphrase: "):
            output += _read_until(fd, prompt)
            os.write(fd, SECRET.encode() + b"\n")
        output += _read_until(fd, b")")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, output
    assert SECRET.encode() not in output, "the typed passphrase was echoed"
    assert hashlib.sha256(SECRET.encode()).hexdigest().encode() in output
    assert b"Passphrase(***)" in output


def _read_until(fd: int, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, f"no {marker!r} from the prompt; got {seen!r}"
        chunk = os.read(fd, 1024)
        assert chunk, f"the prompt ended before {marker!r}; got {seen!r}"
        seen += chunk
    return seen


def _assert_not_exposed(pid: int) -> None:
    for part in ("cmdline", "environ"):
        content = Path(f"/proc/{pid}/{part}").read_bytes()
        assert content, f"/proc/{pid}/{part} is readable"
        assert SECRET.encode() not in content, f"the passphrase is in gpg's {part}"
    environ = dict(
        item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item
    )
    assert b"BOX_PASSPHRASE" not in environ
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"--pinentry-mode\0loopback" in cmdline and b"--batch" in cmdline
    home = cmdline.split(b"--homedir\0", 1)[1].split(b"\0", 1)[0].decode()
    assert not home.startswith(os.path.expanduser("~/.gnupg")) and Path(home).stat().st_mode & 0o777 == 0o700


def test_gpg_never_sees_the_passphrase_in_argv_or_environment_while_encrypting_a_slow_stream(
    tmp_path: Path, tmpdir_root: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("BOX_PASSPHRASE", SECRET)  # would be inherited by a careless child
    read_end, write_end = os.pipe()
    result: dict[str, object] = {}

    def save() -> None:
        with open(read_end, "rb") as stream:
            try:
                result["info"] = archives.write_stream(
                    stream, tmp_path / "w.gpg", kind="workspace", name="w", passphrase=archives.Passphrase(SECRET)
                )
            except BaseException as exc:
                result["error"] = exc

    worker = threading.Thread(target=save)
    worker.start()
    tarball = io.BytesIO()
    with tarfile.open(fileobj=tarball, mode="w") as tar:
        info = tarfile.TarInfo("f")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    raw = tarball.getvalue()
    with open(write_end, "wb") as feed:
        feed.write(raw[:512])  # a header, then the stream stalls: gpg is running and waiting
        feed.flush()
        deadline = time.monotonic() + 60
        while not gpg_children() and time.monotonic() < deadline:
            time.sleep(0.05)
        running = gpg_children()
        assert running, "gpg is running while the stream stalls"
        for pid in running:
            _assert_not_exposed(pid)
        feed.write(raw[512:])
    worker.join(60)
    assert "error" not in result, result
    assert archives.verify(tmp_path / "w.gpg", archives.Passphrase(SECRET)).members == 2


def test_gpg_never_sees_the_passphrase_while_decrypting(
    tmp_path: Path, tmpdir_root: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("BOX_PASSPHRASE", SECRET)
    secret = archives.Passphrase(SECRET)
    tree = sample_tree(tmp_path / "t")
    (tree / "big").write_bytes(os.urandom(4_000_000))  # more than a pipe holds: gpg is still running at the start
    archives.write_tree(tree, tmp_path / "a.gpg", kind="box", name="a", passphrase=secret)
    checked: list[int] = []

    def inspect(_stage: str, _done: int, _total: int | None) -> None:
        for pid in gpg_children():
            _assert_not_exposed(pid)
            checked.append(pid)

    archives.verify(tmp_path / "a.gpg", secret, progress=inspect)
    assert checked, "gpg was inspected while it ran"
    with pytest.raises(archives.WrongPassphrase) as raised:
        archives.verify(tmp_path / "a.gpg", archives.Passphrase(SECRET + "x"))
    out, err = capfd.readouterr()
    assert SECRET not in out + err + str(raised.value) + repr(raised.value)

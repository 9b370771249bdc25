"""A real OpenSSH server on loopback for the kit's tests of SSH backends (Debian's openssh-server).

The server runs as ``/usr/sbin/sshd -D -e`` with a config, host key and authorized_keys of its own,
key-only login for the current user, in namespaces of its own (``unshare``): a mount namespace in
which /tmp and the user's home directory are private directories and /run a fresh tmpfs, and a PID
namespace, so a remote command sees neither this machine's temp files nor its processes, and
stopping the server ends every session and process it started.  Nothing is written into the
user's home: the client side sees its home through an overlay (``client_argv``), because OpenSSH's
client reads ~/.ssh from the password database's home, never from $HOME, and Hermes's SSH
environment passes it no ``-F``; the overlay's upper layer holds the client's key, config and
known_hosts, and takes whatever the client writes.

Needs root (mount namespaces), ``unshare``, ``ssh``, ``scp``, ``ssh-keygen`` and ``/usr/sbin/sshd``;
``missing()`` says which is absent so a test can skip naming it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
TOOLS = ("unshare", "ssh", "scp", "ssh-keygen")
START_DEADLINE_S = 15.0
RUN_DIR = "/run/kit-sshd"  # where the server's files are, inside its namespace
HOST_KEY_ALIAS = "kit-sshd"  # the name the client knows the server's host key by, whatever the port

# Inside the server's mount namespace: a private /run (sshd's privilege-separation directory lives
# there), the server's files copied into it, then the private home and /tmp over the real ones (in
# that order: the private directories themselves may live under /tmp).
_SERVER_SCRIPT = f"""
set -e
mount -t tmpfs -o mode=755 kit-sshd-run /run
mkdir -m 755 /run/sshd
cp -a "$1" {RUN_DIR}
mount --bind "$3" "$4"
mount --bind "$2" /tmp
exec {SSHD} -D -e -f {RUN_DIR}/sshd_config
"""

# The client's home directory: the real one seen through an overlay whose upper layer is the test's
# (it holds ~/.ssh; whatever the client writes lands there, never in the real home, whose
# other files, an interpreter under ~/.pyenv for one, stay visible).
_CLIENT_SCRIPT = (
    'set -e; mount -t overlay kit-client-home -o "lowerdir=$3,upperdir=$1,workdir=$2" "$3"; shift 3; exec "$@"'
)


def missing() -> str | None:
    """Why a real sshd cannot run here (naming the fix), or None when it can."""
    if not Path(SSHD).is_file():
        return f"{SSHD} is missing: install Debian's openssh-server (apt-get install openssh-server)"
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"{', '.join(absent)} missing: install openssh-client and util-linux"
    if os.geteuid() != 0:
        return "the test sshd needs root for its private mount and PID namespaces"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"mount namespaces are not available here (unshare -m: {probe.stderr.strip()})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SSHServer:
    """One running sshd and the client-side files that reach it."""

    root: Path
    port: int
    user: str
    key: Path  # the client's private key
    client_home: Path  # the home directory the client side sees (client_argv)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log: Path | None = None

    @property
    def home(self) -> Path:
        """The user's home directory as the server's sessions see it."""
        return self.root / "server-home"

    def backend_config(self) -> dict[str, object]:
        """The --backend-config of ``hermes:ssh`` for this server (Hermes's own terminal config keys)."""
        target = {"ssh_host": "127.0.0.1", "ssh_port": self.port, "ssh_user": self.user, "ssh_key": str(self.key)}
        return {"terminal": target}

    def client_argv(self, *command: str) -> list[str]:
        """``command`` in a mount namespace whose home directory has ``client_home`` laid over it."""
        home = pwd.getpwuid(os.getuid()).pw_dir
        work = self.root / "client-home-work"
        work.mkdir(exist_ok=True)
        layers = [str(self.client_home), str(work), home]
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", _CLIENT_SCRIPT, "sh", *layers, *command]

    def stop(self) -> None:
        """End the server and, with its PID namespace, every session and process under it."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None


def start(root: Path) -> SSHServer:
    """Make the keys and config under ``root`` and start sshd; it accepts connections when this returns."""
    user = pwd.getpwuid(os.getuid())
    etc, tmp, home, client_home = root / "etc", root / "server-tmp", root / "server-home", root / "client-home"
    for path in (etc, tmp, home, client_home / ".ssh"):
        path.mkdir(parents=True)
    tmp.chmod(0o1777)
    for path in (home, client_home, client_home / ".ssh"):
        path.chmod(0o700)
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kit-test"]
    subprocess.run([*keygen, "-f", str(etc / "host_key")], check=True)
    key = client_home / ".ssh" / "id_kit"
    subprocess.run([*keygen, "-f", str(key)], check=True)
    shutil.copy(f"{key}.pub", etc / "authorized_keys")
    (etc / "authorized_keys").chmod(0o600)
    port = _free_port()
    (etc / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {RUN_DIR}/host_key",
                f"AuthorizedKeysFile {RUN_DIR}/authorized_keys",
                f"AllowUsers {user.pw_name}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "PidFile none",
                "UseDNS no",
                # Hermes multiplexes every command of an environment over one ControlMaster connection.
                "MaxSessions 200",
                "MaxStartups 200",
                "Subsystem sftp internal-sftp",
                "LogLevel INFO",
                "",
            ]
        )
    )
    host_public = (etc / "host_key.pub").read_text().split()
    # The host key is known by an alias, not by [127.0.0.1]:PORT: a kit TCP fault proxy in front of the
    # server (another port each run) is then the same host, and ssh adds no known_hosts entry for it.
    (client_home / ".ssh" / "known_hosts").write_text(f"{HOST_KEY_ALIAS} {host_public[0]} {host_public[1]}\n")
    (client_home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  IdentitiesOnly yes\n  UserKnownHostsFile {client_home}/.ssh/known_hosts\n"
        f"  HostKeyAlias {HOST_KEY_ALIAS}\n"
    )
    log = root / "sshd.log"
    server = SSHServer(root, port, user.pw_name, key, client_home, log=log)
    with open(log, "wb") as sink:
        server.process = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
                "sh",
                "-c",
                _SERVER_SCRIPT,
                "sh",
                str(etc),
                str(tmp),
                str(home),
                user.pw_dir,
            ],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_listening(server)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_listening(server: SSHServer) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        assert server.process is not None
        if server.process.poll() is not None:
            raise RuntimeError(f"sshd exited with {server.process.returncode}: {_tail(server.log)}")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=1) as conn:
                if conn.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"sshd did not accept connections within {START_DEADLINE_S:g}s: {_tail(server.log)}")


def _tail(log: Path | None) -> str:
    try:
        return log.read_text("utf-8", "replace")[-1500:] if log else ""
    except OSError:
        return ""

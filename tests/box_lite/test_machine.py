"""Boxes as machines: the tools layer over the base image, the agent account, provisioning (machine.py).

Real boxes through the real ``hermes-box`` entry.  Offline where the machine allows: a package is a
.deb built here with dpkg-deb and installed with dpkg; only the must-show apt-get install reaches
the Debian mirror (``full``; skipped, saying so, when apt cannot fetch).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from isolation import NamespaceDriver
from tests.box_lite.test_cli import PASSPHRASE, hb, ok

_DRIVER = NamespaceDriver(spares=0, probe=False)
_OK, _WHY = NamespaceDriver(spares=0).available()
needs_machines = pytest.mark.skipif(
    not (_OK and _DRIVER.root_layers),
    reason=f"boxes are machines only as root with user namespaces here ({_WHY})",
)
needs_sudo = pytest.mark.skipif(
    shutil.which("sudo") is None,
    reason="the host base has no sudo (the noxfile installs it); without it provisioning would need the network",
)
UID_BASE = _DRIVER.box_uid
PROBE = "hermes-box-probe"


def write_env(home: Path, text: str) -> None:
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "box.env").write_text(text)


def box_sh(home: Path, name: str, script: str, *, root: bool = False) -> subprocess.CompletedProcess[str]:
    return hb(home, "exec", name, *(["--root"] if root else []), "--", "sh", "-c", script)


def probe_deb(where: Path) -> Path:
    """A tiny Debian package (``/usr/bin/hermes-box-probe`` printing a word), built here: no network."""
    root = where / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {PROBE}\nVersion: 1.0\nArchitecture: all\nMaintainer: kit tests <tests@invalid>\n"
        "Description: a package a box installs in its tools layer\n"
    )
    program = root / "usr" / "bin" / PROBE
    program.write_text("#!/bin/sh\necho installed-in-the-tools-layer\n")
    program.chmod(0o755)
    deb = where / f"{PROBE}.deb"
    ok_run = subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], capture_output=True)
    assert ok_run.returncode == 0, ok_run.stderr
    return deb


@needs_machines
@needs_sudo
def test_agent_account_owns_home_and_has_sudo(box_home: Path) -> None:
    """Commands run as ``agent`` (uid 1000 inside) who owns /data's home and workspace and has
    passwordless sudo; ``exec --root`` is the box's root; on the host the agent is the box's id range."""
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    assert box_sh(box_home, "alpha", "whoami; id -u; id -g").stdout.split() == ["agent", "1000", "1000"]
    owners = box_sh(box_home, "alpha", "stat -c %U:%G /data /home/agent /home/agent/workspace").stdout.split()
    assert owners == ["agent:agent"] * 3
    assert ok(box_sh(box_home, "alpha", "sudo -n true && sudo -n id -u")).stdout.strip() == "0"
    assert ok(box_sh(box_home, "alpha", "id -u; echo $HOME", root=True)).stdout.split() == ["0", "/root"]
    # the agent cannot write the system; its root can, into the tools layer only
    assert box_sh(box_home, "alpha", "touch /usr/bin/agent-was-here").returncode != 0
    ok(box_sh(box_home, "alpha", "touch /usr/local/bin/root-was-here", root=True))
    assert not Path("/usr/local/bin/root-was-here").exists()
    tools = box_home / "data" / "boxes" / "alpha" / "tools"
    made = tools / "upper" / "usr" / "local" / "bin" / "root-was-here"
    assert made.stat().st_uid == UID_BASE
    home = box_home / "data" / "boxes" / "alpha" / "data" / "home"
    assert (home.stat().st_uid, home.stat().st_gid) == (UID_BASE + 1000, UID_BASE + 1000)
    versions = json.loads((box_home / "data" / "boxes" / "alpha" / "tools-versions.json").read_text())
    assert versions["sudo"].startswith("Sudo version")
    assert (box_home / "run" / "alpha" / "provision" / "account.log").is_file()
    ok(hb(box_home, "doctor", "alpha"))


@needs_machines
@needs_sudo
def test_root_only_host_files_stay_hidden(box_home: Path) -> None:
    """The base is idmapped (host root's files are the box root's), so what other users may not read on
    the host (/etc/shadow, SSH host keys, private TLS keys) is hidden by the mask: not even the box's
    root sees it; the box has its own shadow and sudoers instead."""
    hidden = []
    for folder, dirs, files in os.walk("/etc"):
        for entry in [*dirs, *files]:
            path = os.path.join(folder, entry)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
            if st.st_mode & need != need:
                hidden.append(path)
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in hidden]
    # The box's own account files (useradd keeps a backup of each with a '-'), checked by content below.
    own = {"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d", "/etc/.pwd.lock"}
    own |= {"/etc/shadow-", "/etc/gshadow-"}
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    shown = [p for p in hidden if p not in own]
    script = "".join(f"[ -e '{p}' ] && echo '{p}'; " for p in shown) + "true"
    assert ok(box_sh(box_home, "alpha", script, root=True)).stdout.split() == []
    shadow = ok(
        box_sh(box_home, "alpha", "cat /etc/shadow /etc/shadow- /etc/gshadow- 2>/dev/null; true", root=True)
    ).stdout
    assert "agent:" in shadow
    if os.path.exists("/etc/shadow"):
        host = Path("/etc/shadow").read_text()
        hashes = [line.split(":")[1] for line in host.splitlines() if line.count(":") > 2]
        assert not [h for h in hashes if len(h) > 2 and h in shadow]


@needs_machines
@needs_sudo
@pytest.mark.suite
def test_packages_land_in_the_tools_layer_repair_replaces_them_save_keeps_state(box_home: Path, tmp_path: Path) -> None:
    """A package installed in the box lands in its tools layer (the host is untouched); repair rebuilds
    the tools layer (the package is gone) and keeps ~/workspace; save/load carries the file, not the tool."""
    deb = probe_deb(tmp_path)
    host_status = Path("/var/lib/dpkg/status").read_bytes()
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    shutil.copy(deb, box_home / "data" / "boxes" / "alpha" / "tmp" / deb.name)
    ok(box_sh(box_home, "alpha", f"sudo dpkg -i /tmp/{deb.name}"))
    assert ok(box_sh(box_home, "alpha", PROBE)).stdout == "installed-in-the-tools-layer\n"
    assert not Path(f"/usr/bin/{PROBE}").exists() and Path("/var/lib/dpkg/status").read_bytes() == host_status
    ok(box_sh(box_home, "alpha", "echo precious > ~/workspace/keep"))

    done = ok(hb(box_home, "repair", "alpha"))
    assert "alpha: healthy" in done.stdout
    assert box_sh(box_home, "alpha", f"command -v {PROBE}").returncode != 0
    assert box_sh(box_home, "alpha", f"dpkg -s {PROBE}").returncode != 0
    assert ok(box_sh(box_home, "alpha", "cat ~/workspace/keep; whoami")).stdout == "precious\nagent\n"

    shutil.copy(deb, box_home / "data" / "boxes" / "alpha" / "tmp" / deb.name)  # /tmp is emptied at each start
    ok(box_sh(box_home, "alpha", f"sudo dpkg -i /tmp/{deb.name}"))
    archive = tmp_path / "alpha.tar.gz.gpg"
    ok(hb(box_home, "save", "alpha", "--out", str(archive), env={"BOX_PASSPHRASE": PASSPHRASE}))
    ok(hb(box_home, "load", str(archive), "beta", env={"BOX_PASSPHRASE": PASSPHRASE}))
    assert ok(box_sh(box_home, "beta", "cat ~/workspace/keep; whoami")).stdout == "precious\nagent\n"
    assert box_sh(box_home, "beta", f"command -v {PROBE}").returncode != 0
    for name in ("alpha", "beta"):
        ok(hb(box_home, "rm", name, "--force"))


@needs_machines
def test_unusable_base_image_is_refused_before_anything_is_made(box_home: Path, tmp_path: Path) -> None:
    write_env(box_home, f"BASE_IMAGE={tmp_path / 'missing'}\n")
    done = hb(box_home, "new", "alpha")
    assert done.returncode == 2 and "BASE_IMAGE" in done.stderr and "mmdebstrap" in done.stderr, done.stderr
    not_root = tmp_path / "not-a-root"
    (not_root / "etc").mkdir(parents=True)
    write_env(box_home, f"BASE_IMAGE={not_root}\n")
    done = hb(box_home, "new", "alpha")
    assert done.returncode == 2 and "no /usr" in done.stderr, done.stderr
    tarball = tmp_path / "not-a-root.tar.gz"
    assert subprocess.run(["tar", "-czf", str(tarball), "-C", str(not_root), "."]).returncode == 0
    write_env(box_home, f"BASE_IMAGE={tarball}\n")
    done = hb(box_home, "new", "alpha")
    assert done.returncode == 2 and "no /usr" in done.stderr, done.stderr
    assert not list((box_home / "data" / "bases").iterdir())  # the extraction it refused is removed
    write_env(box_home, "BASE_IMAGE=relative/path\n")
    done = hb(box_home, "new", "alpha")
    assert done.returncode == 2 and "absolute path" in done.stderr, done.stderr
    assert not (box_home / "data" / "boxes" / "alpha").exists()


@needs_machines
@needs_sudo
@pytest.mark.suite
def test_directory_base_image(box_home: Path, tmp_path: Path) -> None:
    """BASE_IMAGE naming a root file system directory: the box's / is its tools layer over that
    directory (here a hard-linked copy of this machine's /usr and /etc, standing in for an mmdebstrap
    build), the agent account made in it; the directory itself is never written."""
    base = tmp_path / "rootfs"
    base.mkdir()
    ok_copy = subprocess.run(["cp", "-al", "/usr", "/etc", str(base)], capture_output=True)
    assert ok_copy.returncode == 0, ok_copy.stderr
    for link in ("bin", "sbin", "lib", "lib64"):
        if os.path.islink(f"/{link}"):
            os.symlink(os.readlink(f"/{link}"), base / link)
    for folder in ("var/lib", "var/cache", "var/log", "tmp", "root", "home"):
        (base / folder).mkdir(parents=True, exist_ok=True)
    shutil.copytree("/var/lib/dpkg", base / "var/lib/dpkg", symlinks=True)
    write_env(box_home, f"BASE_IMAGE={base}\n")
    before = (base / "etc" / "passwd").read_text()
    ok(hb(box_home, "new", "alpha", "--no-doctor"))
    assert box_sh(box_home, "alpha", "whoami; sudo -n id -un").stdout.split() == ["agent", "root"]
    ok(box_sh(box_home, "alpha", "sudo touch /etc/written-in-the-box /usr/local/written"))
    assert not (base / "etc" / "written-in-the-box").exists() and not (base / "usr/local/written").exists()
    assert (base / "etc" / "passwd").read_text() == before  # the agent is in the tools layer's copy
    record = json.loads((box_home / "data" / "boxes" / "alpha" / "box.json").read_text())
    assert record["machine"] == {"base": str(base), "base_dir": str(base)}


@needs_machines
@pytest.mark.full
def test_provisioning_step_failure_is_clear(box_home: Path) -> None:
    """NODE_MAJOR that the base's package sources do not offer: `new` fails naming the step, what the
    sources offer and the fix, and removes the box it made (apt-get update reaches the mirror)."""
    write_env(box_home, "NODE_MAJOR=11\n")
    done = hb(box_home, "new", "alpha", timeout=600)
    assert done.returncode == 1, done.stderr
    assert "provisioning step node" in done.stderr and "Node.js 11 is not in the base's package sources" in (
        done.stderr
    )
    assert "hermes-box repair alpha" in done.stderr
    assert not (box_home / "data" / "boxes" / "alpha").exists()


@needs_machines
@pytest.mark.full
def test_apt_get_install_from_the_mirror_then_repair_and_save(box_home: Path, tmp_path: Path) -> None:
    """The must-show: `sudo apt-get install -y cowsay` in the box (from the Debian mirror), the program
    runs; repair removes it and keeps ~/workspace; save/load carries the file, not the package."""
    ok(hb(box_home, "new", "alpha", "--no-doctor", timeout=600))
    done = box_sh(
        box_home, "alpha", "sudo apt-get install -y cowsay || (sudo apt-get update && sudo apt-get install -y cowsay)"
    )
    if done.returncode != 0 and any(
        word in done.stdout + done.stderr for word in ("Could not resolve", "Failed to fetch", "Temporary failure")
    ):
        pytest.skip(f"the Debian mirror is unreachable from here: {done.stderr.strip().splitlines()[-1:]}")
    ok(done)
    assert "moo" in ok(box_sh(box_home, "alpha", "/usr/games/cowsay moo")).stdout
    ok(box_sh(box_home, "alpha", "echo precious > ~/workspace/f"))
    ok(hb(box_home, "repair", "alpha", timeout=600))
    assert box_sh(box_home, "alpha", "test -e /usr/games/cowsay").returncode != 0
    assert ok(box_sh(box_home, "alpha", "cat ~/workspace/f")).stdout == "precious\n"
    ok(box_sh(box_home, "alpha", "sudo apt-get install -y cowsay"))
    archive = tmp_path / "alpha.tar.gz.gpg"
    ok(hb(box_home, "save", "alpha", "--out", str(archive), env={"BOX_PASSPHRASE": PASSPHRASE}))
    ok(hb(box_home, "load", str(archive), "beta", env={"BOX_PASSPHRASE": PASSPHRASE}, timeout=600))
    assert ok(box_sh(box_home, "beta", "cat ~/workspace/f")).stdout == "precious\n"
    assert box_sh(box_home, "beta", "test -e /usr/games/cowsay").returncode != 0
    for name in ("alpha", "beta"):
        ok(hb(box_home, "rm", name, "--force"))


@needs_machines
@pytest.mark.full
def test_provisioning_installs_what_box_env_asks_and_records_versions(box_home: Path) -> None:
    """INSTALL_NEOVIM (from the base's package sources) and NODE_MAJOR (here the major the base has:
    the step finds it installed): `new` installs, logs each step, records the versions; `repair` makes
    the tools layer again and provisions it again."""
    have = subprocess.run(["node", "--version"], capture_output=True, text=True) if shutil.which("node") else None
    major = have.stdout.strip().lstrip("v").split(".")[0] if have and have.returncode == 0 else "18"
    host_nvim = shutil.which("nvim")
    write_env(box_home, f"INSTALL_NEOVIM=on\nNODE_MAJOR={major}\n")
    done = hb(box_home, "new", "alpha", "--no-doctor", timeout=900)
    if done.returncode != 0 and "Failed to fetch" in (box_home / "run/alpha/provision/neovim.log").read_text():
        pytest.skip("the Debian mirror is unreachable from here")
    ok(done)
    logs = box_home / "run" / "alpha" / "provision"
    assert sorted(p.name for p in logs.iterdir()) == ["account.log", "neovim.log", "node.log"]
    versions = json.loads((box_home / "data" / "boxes" / "alpha" / "tools-versions.json").read_text())
    assert versions["node"].startswith(f"v{major}.") and versions["nvim"].startswith("NVIM v")
    assert ok(box_sh(box_home, "alpha", "nvim --version | head -n1")).stdout.startswith("NVIM v")
    assert shutil.which("nvim") == host_nvim  # installed in the box's tools layer, not on the host
    ok(hb(box_home, "repair", "alpha", timeout=900))
    assert "already installed" not in (logs / "neovim.log").read_text()  # installed again: a new tools layer
    assert ok(box_sh(box_home, "alpha", "nvim --version | head -n1")).stdout.startswith("NVIM v")

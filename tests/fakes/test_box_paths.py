"""Every fake judges a command's directory, a file path and a program path inside the box, never on this machine.

A directory that exists here but not in the box (``/root``; a fresh temp directory of this machine, under its
/tmp and outside it) must not be taken as the box's: the shared world refuses to start a command there, and each
vendor answers with its own error (Upstash 400 before the command starts, Cloudflare ``invalid_cwd``, DeepInfra
an ``error`` line) instead of running the command in ``/`` or in this machine's directory.  Each fake runs both
isolated (its boxes in namespaces, where they exist here) and unisolated (host paths).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fakes import box_paths
from fakes.cloudflare import BridgeServer
from fakes.deepinfra import DeepInfraServer
from fakes.deepinfra import Settings as DeepInfraSettings
from fakes.deepinfra.testing import tenant
from fakes.upstash import UpstashServer
from fakes.world import PathLayout, World
from isolation import NamespaceDriver

from .cloudflare.bridge_client import FAST, Client, new_id
from .upstash.helpers import Fake

ISOLATION, WHY_NOT = NamespaceDriver().available()
MODES = [
    pytest.param(True, id="isolated", marks=pytest.mark.skipif(not ISOLATION, reason=f"no namespaces: {WHY_NOT}")),
    pytest.param(False, id="unisolated"),
]
MARKER = "only-on-this-machine"
MARKER_TEXT = b"written on this machine"


@pytest.fixture(params=MODES)
def namespaces(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def host_only(tmp_path: Path) -> Iterator[list[str]]:
    """Directories this machine has and no box has: /root, a fresh temp directory under this machine's /tmp,
    and one outside it (in /dev/shm where there is one).  Each fresh one holds a marker file."""
    found = ["/root"]
    under_tmp = tmp_path / "host-only"
    under_tmp.mkdir()
    found.append(str(under_tmp))
    elsewhere = tempfile.mkdtemp(prefix="kit-host-only-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    if elsewhere is not None:
        found.append(elsewhere)
    for fresh in found[1:]:
        (Path(fresh) / MARKER).write_bytes(MARKER_TEXT)
    try:
        yield found
    finally:
        if elsewhere is not None:
            shutil.rmtree(elsewhere, ignore_errors=True)


@pytest.fixture
def host_program(tmp_path: Path) -> str:
    """An executable script that exists on this machine only."""
    script = tmp_path / "host-program"
    script.write_text("#!/bin/sh\necho ran-on-this-machine\n")
    script.chmod(0o755)
    return str(script)


def _untouched(dirs: list[str]) -> None:
    for path in dirs[1:]:
        assert sorted(os.listdir(path)) == [MARKER], f"a box wrote into this machine's {path}"


# -- the shared world (fakes/world.py, fakes/box_paths.py) ------------------------------------------------------
def test_the_world_starts_commands_only_in_directories_of_the_box(
    namespaces: bool, host_only: list[str], host_program: str, tmp_path: Path
) -> None:
    world = World(tmp_path / "world", layout=PathLayout(), namespaces=namespaces)
    try:
        box = world.create()
        for path in host_only:
            with pytest.raises(box_paths.NotInBox, match="no such directory in the box"):
                world.spawn(box, cmd="pwd", cwd=path, login=False)
        # mkdir -p: /root is not the box's to make (its root is read-only); under /tmp it lands in the box's
        # own /tmp; in /dev/shm an isolated box makes it in its own mount, an unisolated one cannot.
        with pytest.raises(box_paths.NotInBox, match="cannot be made in the box"):
            box_paths.make_dirs(world, box, "/root")
        for path in host_only[1:]:
            if namespaces or path.startswith("/tmp/"):
                box_paths.make_dirs(world, box, path + "/sub")
            else:
                with pytest.raises(box_paths.NotInBox, match="cannot be made in the box"):
                    box_paths.make_dirs(world, box, path + "/sub")
        # What the box does have is found in the box, whatever this machine holds at that path.
        box_paths.make_dirs(world, box, "/workspace/home/only-in-box")
        assert not os.path.exists("/workspace/home/only-in-box") or not namespaces
        for path in ("/workspace/home/only-in-box", "/usr", "/"):
            proc = world.spawn(box, cmd="pwd", cwd=path, login=False)
            out = proc.pipes()[1].read().decode()
            assert proc.wait(10) == 0
            if namespaces:
                assert out == path + "\n"
        if namespaces:  # an isolated box's program paths are its own (an unisolated one runs on this machine)
            proc = world.spawn(box, argv=[host_program])
            _, out, err = proc.pipes()
            assert proc.wait(10) == 127 and b"ran-on" not in out.read(), err.read()
        _untouched(host_only)
    finally:
        world.close()


# -- Upstash Box: the exec session's cwd, the REST exec's folder, the files API ---------------------------------
@pytest.fixture
def upstash(namespaces: bool) -> Iterator[Fake]:
    with UpstashServer(namespaces=namespaces) as server:
        key = "ubx_paths_" + os.urandom(6).hex()
        server.service.add_key(key)
        yield Fake(server, key)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # websockets about the SDK's connect()
def test_upstash_refuses_a_cwd_the_box_does_not_have(upstash: Fake, host_only: list[str], host_program: str) -> None:
    from upstash_box import BoxError

    box = upstash.create()
    for path in host_only:
        with pytest.raises(BoxError, match="no such directory in the box"):
            box.exec.session(cmd="pwd", cwd=path)
        answer = httpx.post(
            f"{upstash.url}/v2/box/{box.id}/exec",
            json={"command": ["pwd"], "folder": path},
            headers=upstash.headers,
            timeout=30,
        )
        assert answer.status_code == 400 and "no such directory in the box" in answer.json()["error"], answer.text
        marker = f"{path}/{MARKER}" if path != "/root" else "/root/.bashrc"
        read = httpx.get(
            f"{upstash.url}/v2/box/{box.id}/files/read", params={"path": marker}, headers=upstash.headers, timeout=30
        )
        assert read.status_code in (403, 404), read.text
    if upstash.world.isolated:
        out = bytearray()
        handle = box.exec.session(argv=[host_program], on_stdout=out.extend)
        assert handle.wait(10) == 127 and b"ran-on" not in out
        handle.close()
    _untouched(host_only)


# -- Cloudflare bridge: the workspace's configured cwd, /read -------------------------------------------------------
@pytest.fixture
def bridge(namespaces: bool) -> Iterator[Client]:
    with BridgeServer(settings=FAST, namespaces=namespaces) as server:
        client = Client(server)
        yield client
        client.close()


def test_cloudflare_makes_the_cwd_in_the_container_or_answers_invalid_cwd(
    bridge: Client, host_only: list[str], host_program: str
) -> None:
    """/root and /dev/shm are not the container's to make (user hermes, read-only system part): invalid_cwd;
    a path under /tmp is made in the container's own /tmp, empty, as ``mkdir -p`` there would."""
    for path in host_only:
        sid = new_id()
        assert bridge.init(sid, cwd=path).status_code == 200
        run = bridge.exec(sid, f"pwd; ls -A; {host_program}; echo rc=$?")
        if path == "/root" or not path.startswith("/tmp/"):
            if run.error_code != "invalid_cwd":  # made by the box itself in a mount of its own
                assert bridge.server.world.isolated and path.startswith("/dev/shm/"), run.events
                assert run.output.splitlines()[0] == path and MARKER not in run.output, run.output
            else:
                assert run.types == ["error"], run.events
        else:
            assert run.exit_code == 0, run.events
            lines = run.output.splitlines()
            assert MARKER not in lines, lines
            if bridge.server.world.isolated:  # an unisolated box runs programs on this machine
                assert lines[0] == path and lines[-2:] != ["ran-on-this-machine", "rc=0"], lines
        read = bridge.post(f"/v1/sandboxes/{sid}/read", {"path": f"{path}/{MARKER}"})
        assert read.status_code in (400, 404) and MARKER_TEXT not in read.content, read.text
    _untouched(host_only)


# -- DeepInfra: the exec directory (a setting of the fake), fs/content ----------------------------------------------
@pytest.fixture
def deepinfra(namespaces: bool) -> Iterator[DeepInfraServer]:
    settings = DeepInfraSettings(create_delay_s=0, boot_delay_s=0, stop_delay_s=0)
    with DeepInfraServer(settings=settings, namespaces=namespaces) as server:
        yield server


def _exec_lines(base_url: str, key: str, sandbox_id: str, command: list[str]) -> list[dict]:
    answer = httpx.post(
        f"{base_url}/v1/sandboxes/{sandbox_id}/exec",
        json={"command": command, "timeout_seconds": 30},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return [json.loads(line) for line in answer.content.split(b"\n") if line]


def test_deepinfra_never_runs_a_command_outside_the_sandbox_directory(
    deepinfra: DeepInfraServer, host_only: list[str], host_program: str
) -> None:
    with tenant(deepinfra) as fake:
        sandbox = fake.create()
        for path in host_only[1:]:  # /root is the sandbox user's home: that one the sandbox has
            deepinfra.settings.exec_cwd = path
            lines = _exec_lines(deepinfra.base_url, fake.key, sandbox.id, ["pwd"])
            assert "error" in lines[-1] and "no such directory in the box" in lines[-1]["error"], lines
            assert not any("stdout" in line for line in lines), lines
        deepinfra.settings.exec_cwd = "/root"
        lines = _exec_lines(deepinfra.base_url, fake.key, sandbox.id, ["bash", "-c", f"ls -A; {host_program}"])
        assert lines[-1] == {"returncode": 127} or not deepinfra.world.isolated, lines
        listed = "".join(line.get("stdout", "") for line in lines).split()
        with contextlib.suppress(OSError):
            assert not set(listed) & set(os.listdir("/root")) - {".bashrc", ".profile"}, listed
        read = fake.http("GET", f"/v1/sandboxes/{sandbox.id}/fs/content", params={"path": f"{host_only[1]}/{MARKER}"})
        assert read.status_code == 400 and MARKER_TEXT not in read.content, read.text
    _untouched(host_only)

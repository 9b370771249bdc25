"""The DeepInfra fake's fs/content: raw bytes under /workspace only, parents, 404, 400, 413."""

from __future__ import annotations

import pytest
from deepinfra import BadRequestError, ContentTooLargeError, NotFoundError

from fakes.deepinfra.settings import MAX_FILE_BYTES
from fakes.deepinfra.testing import Tenant


def test_write_then_read_raw_bytes_with_parents_created(sandbox):  # type: ignore[no-untyped-def]
    data = bytes(range(256)) * 5
    sandbox.fs.write("/workspace/deep/er/file.bin", data)
    assert sandbox.fs.read("/workspace/deep/er/file.bin") == data
    seen = sandbox.exec("bash", "-c", "sha256sum < /workspace/deep/er/file.bin").stdout.split()[0]
    import hashlib

    assert seen == hashlib.sha256(data).hexdigest(), "the command sees other bytes than the fs API wrote"
    sandbox.fs.write("/workspace/deep/er/file.bin", "text is utf-8")
    assert sandbox.fs.read("/workspace/deep/er/file.bin") == b"text is utf-8"


def test_files_written_by_commands_are_readable(sandbox):  # type: ignore[no-untyped-def]
    sandbox.exec("bash", "-c", "printf 'a\\0b' > /workspace/made.txt")
    assert sandbox.fs.read("/workspace/made.txt") == b"a\0b"


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "/root/x", "/tmp/x", "/workspace/../etc/passwd", "relative/x", "/workspacex/y"]
)
def test_paths_outside_the_workspace_are_refused(fake: Tenant, sandbox, path: str):  # type: ignore[no-untyped-def]
    with pytest.raises(BadRequestError, match="ERR_PATH_OUTSIDE_WORKSPACE"):
        sandbox.fs.write(path, b"x")
    with pytest.raises(BadRequestError, match="ERR_PATH_OUTSIDE_WORKSPACE"):
        sandbox.fs.read(path)
    raw = fake.http("GET", f"/v1/sandboxes/{sandbox.id}/fs/content", params={"path": path})
    assert raw.status_code == 400 and raw.json()["error"].startswith("ERR_PATH_OUTSIDE_WORKSPACE")


def test_symlinks_cannot_lead_out_of_the_workspace(sandbox):  # type: ignore[no-untyped-def]
    sandbox.exec(
        "bash",
        "-c",
        "ln -s /etc /workspace/etc; ln -s /workspace/real /workspace/alias; "
        "mkdir /workspace/real; echo in > /workspace/real/f",
    )
    with pytest.raises(BadRequestError, match="ERR_PATH_OUTSIDE_WORKSPACE"):
        sandbox.fs.read("/workspace/etc/passwd")
    assert sandbox.fs.read("/workspace/alias/f") == b"in\n", "a link inside the workspace is followed"


def test_missing_is_404_and_a_directory_is_400(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    with pytest.raises(NotFoundError, match="File not found"):
        sandbox.fs.read("/workspace/nope")
    raw = fake.http("GET", f"/v1/sandboxes/{sandbox.id}/fs/content", params={"path": "/workspace/nope"})
    assert raw.json() == {"detail": {"error": "File not found"}}
    with pytest.raises(BadRequestError, match="Is a directory"):
        sandbox.fs.read("/workspace")
    sandbox.fs.write("/workspace/d/f", b"x")
    with pytest.raises(BadRequestError, match="Is a directory"):
        sandbox.fs.write("/workspace/d", b"x")
    raw = fake.http("GET", f"/v1/sandboxes/{sandbox.id}/fs/content", params={"path": "/workspace/d"})
    assert raw.json() == {"error": "Is a directory"}
    with pytest.raises(BadRequestError, match="Not a directory"):
        sandbox.fs.write("/workspace/d/f/under-a-file", b"x")


def test_over_100_mib_is_413_both_ways(sandbox):  # type: ignore[no-untyped-def]
    sandbox.exec("truncate", "-s", str(MAX_FILE_BYTES + 1), "/workspace/big")  # sparse: cheap
    with pytest.raises(ContentTooLargeError):
        sandbox.fs.read("/workspace/big")
    with pytest.raises(ContentTooLargeError):
        sandbox.fs.write("/workspace/too-big", b"\0" * (MAX_FILE_BYTES + 1))
    assert sandbox.exec("ls", "-A", "/workspace").stdout.split() == ["big"], "a refused write left a file"

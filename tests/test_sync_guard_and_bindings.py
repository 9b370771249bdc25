"""The stand-in host's sync-back guard, its WorkspaceBinding, the reference binding check and
tempdir_box's provider settings, on real temp directories and real tar archives."""

from __future__ import annotations

import logging
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.host.standins import file_sync
from conformance.host.standins.terminal_env_provider import WorkspaceBinding
from fakes.tempdir_box import provider_config
from reference.common import workspace_binding

REMOTE = "/sandbox/.hermes"


@pytest.fixture
def home(tmp_path, monkeypatch):
    root = tmp_path / "hermes-home"
    (root / "skills" / "s").mkdir(parents=True)
    (root / "skills" / "s" / "SKILL.md").write_text("skill\n")
    (root / "cache" / "images" / "c").mkdir(parents=True)
    (root / "cache" / "images" / "c" / "data.txt").write_text("cache\n")
    monkeypatch.setenv("HERMES_HOME", str(root))
    return root


def _pairs(home: Path) -> list[tuple[str, str]]:
    return [
        (str(home / "skills/s/SKILL.md"), f"{REMOTE}/skills/s/SKILL.md"),
        (str(home / "cache/images/c/data.txt"), f"{REMOTE}/cache/images/c/data.txt"),
    ]


def _sync_back(home: Path, sandbox_files: dict[str, str], tmp_path: Path) -> None:
    """Push the two files, then sync back an archive holding ``sandbox_files`` (remote path -> text)."""
    staged = tmp_path / "staged"

    def download(dest: Path) -> None:
        with tarfile.open(dest, "w") as tar:
            for remote, text in sandbox_files.items():
                source = staged / remote.lstrip("/")
                source.parent.mkdir(parents=True, exist_ok=True)
                source.write_text(text)
                tar.add(source, arcname=remote.lstrip("/"))

    manager = file_sync.FileSyncManager(
        get_files_fn=lambda: _pairs(home),
        upload_fn=lambda h, r: None,
        delete_fn=lambda paths: None,
        bulk_download_fn=download,
    )
    manager.sync(force=True)
    manager.sync_back(hermes_home=home)


def test_cache_changes_and_new_subdirectories_come_back(home, tmp_path):
    _sync_back(
        home,
        {f"{REMOTE}/cache/images/c/data.txt": "changed\n", f"{REMOTE}/cache/images/c/new/deeper/made.txt": "made\n"},
        tmp_path,
    )
    assert (home / "cache/images/c/data.txt").read_text() == "changed\n"
    assert (home / "cache/images/c/new/deeper/made.txt").read_text() == "made\n"


def test_skills_are_never_written_back(home, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        _sync_back(home, {f"{REMOTE}/skills/s/SKILL.md": "changed\n", f"{REMOTE}/skills/s/added.md": "new\n"}, tmp_path)
    assert (home / "skills/s/SKILL.md").read_text() == "skill\n"
    assert not (home / "skills/s/added.md").exists()
    assert any("skills/" in r.getMessage() for r in caplog.records), "the refusal was not logged"


def test_a_host_symlink_out_of_its_directory_is_not_written_through(home, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    (home / "cache/images/c/link.txt").symlink_to(outside)
    _sync_back(home, {f"{REMOTE}/cache/images/c/link.txt": "escaped\n"}, tmp_path)
    assert outside.read_text() == "untouched\n"


def test_unsafe_targets_are_named(home):
    assert "'..'" in file_sync._unsafe_target(str(home / "cache/../config.yaml"), home)
    assert "plugins/" in file_sync._unsafe_target(str(home / "plugins/p/x.py"), home)
    assert ".env" in file_sync._unsafe_target(str(home / ".env"), home)
    assert file_sync._unsafe_target(str(home / "cache/images/c/data.txt"), home) is None


def test_workspace_binding_validates_itself():
    assert WorkspaceBinding("/work/repo", "session").host_path == "/work/repo"
    for path, source in (("repo", "task"), ("/a/../b", "task"), ("/a", "model")):
        with pytest.raises(ValueError, match="WorkspaceBinding"):
            WorkspaceBinding(path, source)


def test_reference_check_refuses_what_is_no_valid_binding(builtin_host):
    from agent.terminal_env_provider import WorkspaceBinding  # the active host's class

    workspace_binding.check(None, "demo")
    workspace_binding.check(WorkspaceBinding("/work/repo", "factory"), "demo")
    forged = object.__new__(WorkspaceBinding)
    object.__setattr__(forged, "host_path", "relative")
    object.__setattr__(forged, "source", "task")
    for bad in (object(), SimpleNamespace(host_path="/w", source="task"), forged):
        with pytest.raises((TypeError, ValueError), match="workspace_binding"):
            workspace_binding.check(bad, "demo")


def test_tempdir_box_settings():
    assert provider_config.resolve({"persistent_default": "off"}) == {"persistent_default": False}
    assert provider_config.problems({"persistent_default": "maybe"})
    assert provider_config.problems([("persistent_default", True)])
    assert provider_config.persistent_default({"persistent_default": False}) is False
    assert provider_config.persistent_default(None) is True

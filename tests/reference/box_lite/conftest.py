"""Fixtures of the box_lite backend tests: a Box Lite home, a Hermes home, the provider, and the
``hermes-box`` command for disturbing boxes behind the backend's back.  Every box daemon under the
home is stopped at teardown, and a test fails if one survives (the Box Lite tests' own rule)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.box_lite.conftest import stop_all


@pytest.fixture
def box_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builtin_host: Any) -> Iterator[Path]:
    """An empty Box Lite home, read by the backend as HERMES_BOX_HOME, with a private HERMES_HOME beside it."""
    home = tmp_path / "boxes"
    home.mkdir()
    hermes = tmp_path / "hermes"
    hermes.mkdir()
    for name in [n for n in os.environ if n.startswith("HERMES_BOX_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HERMES_BOX_HOME", str(home))
    monkeypatch.setenv("HERMES_HOME", str(hermes))
    yield home
    survivors = stop_all(home)
    assert not survivors, f"box processes survived a stop of every daemon: {survivors}"


@pytest.fixture
def terminal(box_home: Path) -> Callable[..., None]:
    """Write ``terminal:`` settings to the Hermes home's config.yaml."""

    def write(**values: Any) -> None:
        (Path(os.environ["HERMES_HOME"]) / "config.yaml").write_text(yaml.safe_dump({"terminal": values}))

    return write


@pytest.fixture
def provider(box_home: Path) -> Any:
    from reference.box_lite.provider import BoxLiteProvider

    return BoxLiteProvider()


@pytest.fixture
def create(provider: Any) -> Iterator[Callable[..., Any]]:
    """create(task_id, persistent=...) as Hermes calls it; environments left open are cleaned up at the end."""
    made: list[Any] = []

    def make(task_id: str = "task", *, persistent: bool = False) -> Any:
        env = provider.create_environment(
            cwd="", timeout=30, task_id=task_id, container_config={"container_persistent": persistent}
        )
        made.append(env)
        return env

    yield make
    for env in made:
        env.cleanup()


@pytest.fixture
def manager(box_home: Path) -> Any:
    from reference.box_lite.boxes import BoxManager
    from reference.box_lite.paths import BoxHome

    return BoxManager(BoxHome.at(box_home))


@pytest.fixture
def hermes_box(box_home: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``hermes-box --home HOME ARGS`` as a user would, from another process."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "reference.box_lite.cli", "--home", str(box_home), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"hermes-box {' '.join(args)}: {done.stderr}"
        return done

    return run

"""A run's interpreters share a bytecode cache under its temp root where the user writes none.

The unit tests pin the decision; the last test starts real interpreters the
way a run does and shows that the second one compiles nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conformance import bytecode


def test_a_run_caches_bytecode_under_its_root_only_where_writing_is_off(tmp_path: Path) -> None:
    off = {"PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode.run_cache(tmp_path, off) == {
        "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"),
        "PYTHONDONTWRITEBYTECODE": None,
    }
    assert bytecode.run_cache(tmp_path, {}) == {}  # Python's own cache next to the sources serves
    assert bytecode.run_cache(tmp_path, {**off, "PYTHONPYCACHEPREFIX": "/elsewhere"}) == {}  # the user's prefix wins


def test_apply_returns_what_puts_the_environment_back(tmp_path: Path) -> None:
    environ = {"PYTHONDONTWRITEBYTECODE": "1", "OTHER": "x"}
    before = bytecode.apply(bytecode.run_cache(tmp_path, environ), environ)
    assert environ == {"PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"), "OTHER": "x"}
    bytecode.apply(before, environ)
    assert environ == {"PYTHONDONTWRITEBYTECODE": "1", "OTHER": "x"}


def test_this_process_uses_the_cache_until_restored(tmp_path: Path) -> None:
    original = (sys.pycache_prefix, sys.dont_write_bytecode)
    before = bytecode.use_in_this_process({"PYTHONPYCACHEPREFIX": str(tmp_path)})
    try:
        assert (sys.pycache_prefix, sys.dont_write_bytecode) == (str(tmp_path), False)
    finally:
        bytecode.restore_in_this_process(before)
    assert (sys.pycache_prefix, sys.dont_write_bytecode) == original


def test_the_second_interpreter_of_a_run_compiles_nothing(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "kit_probe_module.py").write_text("VALUE = 42\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}  # nox sets one for its sessions
    env.update(PYTHONPATH=str(source), PYTHONDONTWRITEBYTECODE="1")
    bytecode.apply(bytecode.run_cache(tmp_path / "run", env), env)
    probe = "import importlib.util, kit_probe_module as m; print(m.__cached__)"
    first = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    cached = Path(first.stdout.strip())
    assert cached.is_file() and (tmp_path / "run" / "pycache") in cached.parents
    assert not (source / "__pycache__").exists(), "bytecode was written next to the source"
    stamp = cached.stat().st_mtime_ns
    subprocess.run([sys.executable, "-c", probe], env=env, check=True, capture_output=True)
    assert cached.stat().st_mtime_ns == stamp, "the second interpreter compiled the module again"

"""Kit test: conformance/backends.py, the one list of backends the kit knows by name, agrees with
what the project ships (its fakes, its extras, its Hermes plugin entry points)."""

from __future__ import annotations

import importlib.util
import tomllib

import pytest

from conformance import backends, cli
from fakes.services import FAKES
from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("known", backends.KNOWN_BACKENDS.values(), ids=lambda k: k.name)
def test_each_known_backend_has_its_fake_its_module_and_its_extra(known):
    assert known.fake in FAKES, f"{known.name}: no fake named {known.fake!r} in fakes.services"
    assert importlib.util.find_spec(known.spec) is not None, f"{known.name}: {known.spec} is not importable"
    if known.extra is not None:
        assert known.extra in PYPROJECT["project"]["optional-dependencies"], f"{known.name}: no extra {known.extra}"
        assert known.sdk_module is not None
    assert (known.extra is None) == (known.sdk_module is None)


def test_the_reference_backends_are_the_plugins_the_project_installs_for_hermes():
    plugins = set(PYPROJECT["project"]["entry-points"]["hermes_agent.plugins"].values())
    assert {backends.KNOWN_BACKENDS[n].spec for n in backends.REFERENCE_BACKENDS} == plugins
    assert backends.DEFAULT_BACKENDS[0] == backends.DEFAULT_BACKEND


def test_a_missing_sdk_names_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert backends.KNOWN_BACKENDS["deepinfra"].missing_extra() == (
        "backend deepinfra needs its SDK, the 'deepinfra' extra: module 'deepinfra' is not importable. "
        "Install it with: pip install 'hermes-backend-kit[deepinfra]'"
    )
    assert backends.KNOWN_BACKENDS["cloudflare_sandbox"].missing_extra() is None  # plain HTTP, no SDK


def test_the_backends_command_lists_each_with_its_fake_and_extra(capsys):
    assert cli.main(["backends"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(backends.KNOWN_BACKENDS)
    for line, known in zip(lines, backends.KNOWN_BACKENDS.values(), strict=True):
        assert f"fake: {known.fake}" in line
        assert (f"pip install 'hermes-backend-kit[{known.extra}]'" in line) == (known.extra is not None), line


def test_a_missing_host_program_is_named_with_its_install(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    note = backends.KNOWN_BACKENDS["box_lite"].slow_here()
    assert note is not None and "no sudo" in note and "apt-get install sudo" in note
    assert backends.KNOWN_BACKENDS["upstash_box"].slow_here() is None  # its boxes take nothing from here
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert backends.KNOWN_BACKENDS["box_lite"].slow_here() is None

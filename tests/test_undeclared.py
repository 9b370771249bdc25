"""Undeclared is not absent: signs of an optional capability, declaring and disclaiming, probes and their rule."""

from __future__ import annotations

import copy
import importlib
import json
import textwrap
import types

import pytest
import yaml

from conformance import capabilities, config, signs
from conformance.report import markdown, table, verify
from conformance.report.headline import headline
from tests.report_sim import CONTRACT, DECLARED, WORLD, rederive, run

PERSISTENT_CLAUSES = sorted(c.id for c in CONTRACT if "persistence" in c.capabilities)
SIGN = "sets self.persistent (Hermes reads _persistent) (plugin.env:9)"


# ------------------------------------------------------------------ signs
PACKAGE = {
    "__init__.py": '''
        """Mentions container_persistent, FileSyncManager and sync_back in a docstring: no sign."""
        from .env import Env


        class Provider:
            environment_class = Env
            cache_path_base = None

            def get_config_schema(self):
                return {"stdin_chunk_kib": {"type": "int"}}


        provider = Provider()
    ''',
    "env.py": '''
        # self._persistent = True and FileSyncManager in a comment: no sign either


        class Env:
            """Keeps the mode under the wrong name."""

            def __init__(self, *, persistent=False):
                self.mode = "x"
                self.persistent = persistent
    ''',
}


def _package(tmp_path, monkeypatch, name: str, files: dict[str, str]) -> types.ModuleType:
    root = tmp_path / name
    root.mkdir()
    for filename, text in files.items():
        (root / filename).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def test_signs_come_from_the_plugins_code_not_its_comments(tmp_path, monkeypatch):
    module = _package(tmp_path, monkeypatch, "kit_signs_plugin", PACKAGE)
    loaded = types.SimpleNamespace(module=module, manifest={"name": "x", "requires_env": [{"name": "X_PERSIST_DIR"}]})
    found = signs.find(module.provider, loaded, ["persistence", "file-sync", "stdin-stream"])
    assert found["persistence"] == [
        "takes a persistent option in __init__() (kit_signs_plugin.env:7)",
        "sets self.persistent (Hermes reads _persistent) (kit_signs_plugin.env:9)",
        "plugin.yaml setting 'X_PERSIST_DIR'",
    ]
    assert found["stdin-stream"] == ["config schema key 'stdin_chunk_kib'"]
    assert found["file-sync"] == [], "a docstring or comment is not a sign"


def test_signs_follow_the_classes_a_provider_names_into_their_modules(tmp_path, monkeypatch):
    module = _package(
        tmp_path,
        monkeypatch,
        "kit_signs_split",
        {
            "__init__.py": "",
            "provider.py": """
            from kit_signs_split.sync_env import SyncEnv


            class Provider:
                environment_class = SyncEnv

                @property
                def cache_path_base(self):
                    return "~/.hermes"
        """,
            "sync_env.py": """
            # FileSyncManager comes from Hermes's tools.environments.file_sync at run time


            class SyncEnv:
                def cleanup(self):
                    self._sync = FileSyncManager()
                    self._sync.sync_back()
        """,
        },
    )
    provider_module = importlib.import_module("kit_signs_split.provider")
    # loaded by module:attr: only the spec's module is the plugin's module; the environment's is found
    loaded = types.SimpleNamespace(module=provider_module, manifest=None)
    found = signs.find(provider_module.Provider(), loaded, ["file-sync"])["file-sync"]
    assert found == [
        "uses Hermes's FileSyncManager (kit_signs_split.sync_env:6)",
        "calls sync_back() (kit_signs_split.sync_env:7)",
        "provider.cache_path_base is '~/.hermes' (Hermes's cache files land there)",
    ]
    assert module is not None


def test_the_misnamed_persistent_mutant_shows_signs_of_persistence(builtin_host):
    from fakes.mutants import misnamed_persistent

    loaded = types.SimpleNamespace(module=misnamed_persistent, manifest=None)
    found = signs.find(misnamed_persistent.provider, loaded, ["persistence"])["persistence"]
    assert found[0].startswith("sets self.persistent (Hermes reads _persistent) (fakes.mutants.misnamed_persistent:")
    assert any(s.startswith("reads terminal.container_persistent (fakes.tempdir_box.box_provider:") for s in found)


# ------------------------------------------------------------------ declaring and disclaiming
class _Provider:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def _resolve(provider, manifest=None, caps=None, disclaims=None):
    from conformance.host import abi

    abi.install("builtin")  # the provider ABC the config methods are compared with is the host's
    loaded = types.SimpleNamespace(module=None, manifest=manifest)
    return capabilities.resolve(
        CONTRACT, provider=provider, loaded=loaded, config_caps=caps, config_disclaims=disclaims, world=None
    )


def test_the_first_source_that_says_anything_speaks_for_both_lists():
    provider = _Provider(conformance_capabilities={"persistence"}, conformance_disclaims={"file-sync"})
    manifest = {"conformance": {"capabilities": ["stdin-stream"], "disclaims": ["persistence"]}}
    caps = _resolve(provider, manifest)
    assert (caps.declared, caps.disclaimed) == ({"persistence"}, {"file-sync"})
    assert caps.declared_by == "provider attribute conformance_capabilities and conformance_disclaims"
    assert caps.undeclared == {"stdin-stream": ()} and caps.probed == frozenset()
    # --backend-config replaces both lists of the plugin, even when it only disclaims
    caps = _resolve(provider, manifest, disclaims=["persistence"])
    assert (caps.declared, caps.disclaimed, caps.declared_by) == (set(), {"persistence"}, "backend-config disclaims")
    assert set(caps.undeclared) == {"file-sync", "stdin-stream"}
    caps = _resolve(_Provider(), manifest)
    assert (caps.declared, caps.disclaimed) == ({"stdin-stream"}, {"persistence"})


def test_declaring_and_disclaiming_the_same_capability_is_a_setup_error(tmp_path):
    with pytest.raises(
        capabilities.CapabilityError,
        match=r"provider attribute .* both declare and disclaim "
        r"persistence — keep each capability in one list",
    ):
        _resolve(_Provider(conformance_capabilities=["persistence"], conformance_disclaims=["persistence"]))
    path = tmp_path / "backend.yaml"
    path.write_text(yaml.safe_dump({"capabilities": ["file-sync"], "disclaims": ["file-sync", "persistence"]}))
    with pytest.raises(config.BackendConfigError, match=r"file-sync both declared .* and disclaimed"):
        config.load(str(path), set(capabilities.declarable(CONTRACT)))
    path.write_text(yaml.safe_dump({"disclaims": ["persistance"]}))
    with pytest.raises(
        config.BackendConfigError, match="unknown capability persistance in disclaims — use declarable ones:"
    ):
        config.load(str(path), set(capabilities.declarable(CONTRACT)))


def test_an_undeclared_capability_with_signs_is_probed_and_one_without_is_absent(tmp_path, monkeypatch):
    module = _package(tmp_path, monkeypatch, "kit_signs_probe", PACKAGE)
    loaded = types.SimpleNamespace(module=module, manifest=None)
    caps = capabilities.resolve(CONTRACT, provider=module.provider, loaded=loaded, config_caps=None, world=None)
    assert caps.probed == {"persistence", "stdin-stream"}
    assert {"persistence", "stdin-stream"} <= caps.present and "file-sync" not in caps.present
    assert caps.undeclared["file-sync"] == ()
    # disclaimed: no probe, whatever the code shows
    caps = capabilities.resolve(
        CONTRACT,
        provider=module.provider,
        loaded=loaded,
        config_caps=None,
        world=None,
        config_disclaims=["persistence", "stdin-stream", "file-sync"],
    )
    assert caps.probed == frozenset() and not {"persistence", "stdin-stream"} & caps.present


def test_the_vendors_own_delete_or_a_world_with_states_gives_sandbox_delete():
    assert "sandbox-delete" not in _resolve(_Provider()).present
    assert "sandbox-delete" in _resolve(_Provider(conformance_delete_sandbox=lambda env: None)).present
    world = types.SimpleNamespace(capabilities=frozenset({"world", "world-states"}))
    caps = capabilities.resolve(
        CONTRACT,
        provider=_Provider(),
        loaded=types.SimpleNamespace(module=None, manifest=None),
        config_caps=None,
        world=world,
    )
    assert "sandbox-delete" in caps.present


# ------------------------------------------------------------------ the probe rule and the report
def _probed(fail=()):
    return run(DECLARED | WORLD, fail=fail, undeclared={"persistence": [SIGN]})


def test_a_probe_failure_blocks_certification_naming_the_capability_and_the_fix():
    report = _probed(fail={"lifecycle.persistent-flag"})
    assert report["certified"] is False
    assert report["not_certified_because"] == [
        "MUST clause lifecycle.persistent-flag failed (probe of undeclared capability persistence: the backend "
        "shows signs of it; declare persistence and fix this, or disclaim it)"
    ]
    entry = report["undeclared"][0]
    assert entry["capability"] == "persistence" and entry["probe"] == "failed" and entry["signs"] == [SIGN]
    assert entry["clauses"] == PERSISTENT_CLAUSES and entry["must_failed"] == ["lifecycle.persistent-flag"]
    assert verify.problems(report) == []
    # every output names it
    lines = table.render(report)
    assert any(
        line.startswith("undeclared capability persistence (signs: sets self.persistent")
        and "probe failed 1 clause(s) (lifecycle.persistent-flag), 1 of them MUST" in line
        for line in lines
    )
    assert "undeclared: persistence (probe failed 1 MUST)" in headline(report)
    md = markdown.render(report, CONTRACT)
    assert "## Undeclared capabilities" in md and md.index("## Undeclared") < md.index("## Profiles")
    assert markdown.badge(report)["message"].endswith("; undeclared: persistence)")


def test_a_probe_that_passes_certifies_and_still_lists_the_capability():
    report = _probed()
    assert report["certified"] is True and report["profile"] == "full"
    assert report["undeclared"][0]["probe"] == "passed"
    assert "undeclared: persistence (probe passed)" in headline(report)
    row = report["profiles"]["full"]
    assert markdown.badge(report)["message"] == (
        f"certified, full ({row['pass']}/{row['pass']} MUST; undeclared: persistence)"
    )
    assert verify.problems(report) == []


def test_without_signs_nothing_is_probed_and_its_clauses_are_not_applicable():
    report = run(DECLARED - {"persistence"} | WORLD)
    entry = report["undeclared"][0]
    assert (entry["capability"], entry["probe"], entry["signs"]) == ("persistence", "not run", [])
    verdict = {c["id"]: c["verdict"] for c in report["clauses"]}
    assert {verdict[cid] for cid in PERSISTENT_CLAUSES} == {"not-applicable"}
    assert report["certified"] is True and "undeclared: persistence (no signs)" in headline(report)
    disclaimed = run(DECLARED - {"persistence"} | WORLD, disclaimed={"persistence"})
    assert disclaimed["undeclared"] == [] and not markdown.badge(disclaimed)["message"].count("undeclared")
    assert verify.problems(report) == [] and verify.problems(disclaimed) == []


@pytest.mark.parametrize(
    "forge, problem",
    [
        # the probe's signs dropped, so the failure looks like a declared-but-absent capability's
        (
            lambda r: r["backend"].update(undeclared_capabilities={"persistence": []}),
            "capabilities: present are file-sync, persistence, stdin-stream of the declarable ones, but declared and "
            "probed are file-sync, stdin-stream",
        ),
        # the probed capability relabelled declared: a declaration nobody made
        (
            lambda r: r["backend"].update(declared_capabilities=["file-sync", "persistence", "stdin-stream"]),
            "capabilities: the undeclared ones are persistence, but neither declared nor disclaimed are none",
        ),
        # the probe's outcome edited
        (
            lambda r: r["undeclared"][0].update(probe="passed", failed=[], must_failed=[]),
            "undeclared capabilities do not follow from the backend's capabilities and the verdicts",
        ),
    ],
)
def test_verify_catches_an_edited_probe(forge, problem):
    forged = copy.deepcopy(_probed(fail={"lifecycle.persistent-flag"}))
    forge(forged)
    found = verify.problems(forged)
    assert any(p.startswith(problem) for p in found), found


def test_a_forger_who_recomputes_the_probe_still_has_the_failing_verdict_against_him():
    forged = copy.deepcopy(_probed(fail={"lifecycle.persistent-flag"}))
    forged["backend"]["undeclared_capabilities"] = {}
    forged["backend"]["disclaimed_capabilities"] = ["persistence"]
    forged["backend"]["capabilities"] = sorted(set(forged["backend"]["capabilities"]) - {"persistence"})
    for clause in forged["clauses"]:
        if clause["id"] in PERSISTENT_CLAUSES:
            clause.update(verdict="not-applicable", reason="not-applicable (capability: the run lacks persistence)")
    rederive(forged)
    assert forged["certified"] is True
    found = verify.problems(forged)
    assert found[0] == (
        "lifecycle.persistent-flag: verdict is not-applicable but its checks say fail "
        "(test_lifecycle.py::test_persistent_environment_says_so failed)"
    ), json.dumps(found, indent=1)

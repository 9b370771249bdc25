"""The stand-ins for agent.secret_scope, tools.env_passthrough and tools.environments.remote_common.

They run as the builtin host serves them (under Hermes's import names), with a private
HERMES_HOME holding config.yaml and .env, and real bash for what a sandbox would do with
the prelude the reference backends build from them.
"""

from __future__ import annotations

import importlib
import subprocess

import pytest

pytestmark = pytest.mark.usefixtures("builtin_host")


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    scope = importlib.import_module("agent.secret_scope")
    passthrough = importlib.import_module("tools.env_passthrough")
    remote = importlib.import_module("tools.environments.remote_common")
    passthrough.clear_env_passthrough()
    yield scope, passthrough, remote, tmp_path
    passthrough.clear_env_passthrough()
    scope.set_multiplex_active(False)


def test_get_secret_follows_the_multiplexing_rules(hosts, monkeypatch):
    scope, _, _, _ = hosts
    monkeypatch.setenv("KIT_T_KEY", "from-environ")
    monkeypatch.setenv("TERMINAL_KIT_T", "global")
    assert scope.get_secret("KIT_T_KEY") == "from-environ"
    token = scope.set_secret_scope({"OTHER": "x"})
    try:
        assert scope.get_secret("KIT_T_KEY") == "from-environ"  # an overlay without multiplexing
        scope.set_multiplex_active(True)
        assert scope.get_secret("KIT_T_KEY", "dflt") == "dflt"  # authoritative under multiplexing
    finally:
        scope.reset_secret_scope(token)
    with pytest.raises(scope.UnscopedSecretError, match="KIT_T_KEY") as refused:
        scope.get_secret("KIT_T_KEY")
    assert "from-environ" not in str(refused.value)  # the message never carries a value
    assert scope.get_secret("TERMINAL_KIT_T") == "global"  # deployment settings stay readable


def test_skill_and_config_names_are_forwarded_but_provider_credentials_never(hosts, monkeypatch):
    _, passthrough, remote, home = hosts
    (home / "config.yaml").write_text("terminal:\n  env_passthrough: [KIT_T_CONFIG, OPENAI_API_KEY]\n")
    for name, value in {"KIT_T_SKILL": "s", "KIT_T_CONFIG": "c", "OPENAI_API_KEY": "sk", "KIT_T_UNLISTED": "u"}.items():
        monkeypatch.setenv(name, value)
    passthrough.register_env_passthrough(["KIT_T_SKILL", "ANTHROPIC_API_KEY", "AUXILIARY_VISION_API_KEY"])
    assert passthrough.get_all_passthrough() == {"KIT_T_SKILL", "KIT_T_CONFIG"}
    assert remote.resolve_passthrough_env() == ({"KIT_T_SKILL": "s", "KIT_T_CONFIG": "c"}, set())
    assert remote.resolve_passthrough_env(explicit_forward=["OPENAI_API_KEY"])[0]["OPENAI_API_KEY"] == "sk"


def test_a_config_change_is_seen_and_dotenv_fills_in(hosts):
    _, _, remote, home = hosts
    (home / ".env").write_text("export KIT_T_DOTENV='from dotenv'\n")
    (home / "config.yaml").write_text("terminal:\n  env_passthrough: []\n")
    assert remote.resolve_passthrough_env() == ({}, set())
    (home / "config.yaml").write_text("terminal:\n  env_passthrough: [KIT_T_DOTENV]\n")
    assert remote.resolve_passthrough_env() == ({"KIT_T_DOTENV": "from dotenv"}, set())


def test_multiplexing_takes_values_from_the_scope_and_unsets_what_it_lacks(hosts, monkeypatch):
    scope, passthrough, remote, _ = hosts
    monkeypatch.setenv("KIT_T_HELD", "another profile's")
    monkeypatch.setenv("KIT_T_MISSING", "another profile's")
    passthrough.register_env_passthrough(["KIT_T_HELD", "KIT_T_MISSING", "TERMINAL_KIT_T"])
    monkeypatch.setenv("TERMINAL_KIT_T", "global")
    scope.set_multiplex_active(True)
    token = scope.set_secret_scope({"KIT_T_HELD": "this profile's"})
    try:
        values, unset = remote.resolve_passthrough_env()
    finally:
        scope.reset_secret_scope(token)
    assert values == {"KIT_T_HELD": "this profile's", "TERMINAL_KIT_T": "global"}
    assert unset == {"KIT_T_MISSING"}
    with pytest.raises(scope.UnscopedSecretError):
        remote.resolve_passthrough_env()  # no scope around the command: fail closed, as Hermes does


def test_the_prelude_unsets_and_exports_in_bash(hosts, monkeypatch):
    scope, passthrough, _, _ = hosts
    from reference.common.passthrough import passthrough_prelude

    passthrough.register_env_passthrough(["KIT_T_HELD", "KIT_T_MISSING", "KIT_T_OWN_KEY"])
    monkeypatch.setenv("KIT_T_OWN_KEY", "the backend's credential")
    scope.set_multiplex_active(True)
    token = scope.set_secret_scope({"KIT_T_HELD": "it's $quoted", "KIT_T_OWN_KEY": "k"})
    try:
        prelude = passthrough_prelude(frozenset({"KIT_T_OWN_KEY"}))
    finally:
        scope.reset_secret_scope(token)
    script = (
        "export KIT_T_MISSING=stale KIT_T_OWN_KEY=stale\n"
        + prelude
        + 'echo "held=$KIT_T_HELD missing=${KIT_T_MISSING-unset} own=${KIT_T_OWN_KEY-unset}"'
    )
    shown = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "held=it's $quoted missing=unset own=unset"


def test_profile_scoped_names_stay_out_of_the_snapshot_under_multiplexing(hosts):
    scope, passthrough, _, _ = hosts
    from conformance.host import features

    base = importlib.import_module("tools.environments.base").BaseEnvironment
    passthrough.register_env_passthrough(["KIT_T_SCOPED"])
    seen = {}
    for multiplexed in (False, True):
        env = features._probe_class(base)()
        env._profile_scoped_passthrough = True
        scope.set_multiplex_active(multiplexed)
        token = scope.set_secret_scope({})
        try:
            env.execute("export KIT_T_SCOPED=from-a-command KIT_T_PLAIN=kept")
            shown = env.execute("echo ${KIT_T_SCOPED-unset} ${KIT_T_PLAIN-unset}")["output"].split()
            with open(env._snapshot_path) as fh:
                snapshot = fh.read()
        finally:
            scope.reset_secret_scope(token)
            scope.set_multiplex_active(False)
            env.cleanup()
        seen[multiplexed] = (shown, "KIT_T_SCOPED" in snapshot)
    assert seen[False] == (["from-a-command", "kept"], True)  # one profile: ordinary shell state
    assert seen[True] == (["unset", "kept"], False)  # multiplexed: never carried to the next command

"""The mini-host: stand-ins, registry rules, plugin loading, host features."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from conformance.host import abi, features, loader
from conformance.host.registry import LegacyPluginContext, PluginContext, ProviderRegistry
from conformance.host.standins.base_output import _BoundedOutputCollector
from conformance.host.standins.terminal_tool import (
    _rewrite_compound_background,
    _transform_sudo_command,
)
from tests.hermes_tree import minimal_tree, run_in_tree

pytestmark = pytest.mark.usefixtures("builtin_host")


def _provider(name: str):
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class Named(TempdirBoxProvider):
        pass

    provider = Named()
    provider.name = name  # type: ignore[misc]
    return provider


def test_builtin_host_serves_every_hermes_name():
    import importlib

    for name in abi.STANDINS:
        assert getattr(importlib.import_module(name), "__kit_standin__", False), name
    assert abi.active().mode == "builtin"


def test_a_process_runs_one_host():
    with pytest.raises(abi.HostError, match="already runs the 'builtin' host"):
        abi.install("hermes")
    with pytest.raises(abi.HostError, match="unknown host"):
        abi.install("docker")


def test_builtin_host_reports_every_feature():
    assert all(features.detect().values())


def test_registry_enforces_the_host_rules():
    registry = ProviderRegistry()
    with pytest.raises(TypeError):
        registry.register(object())
    for bad in ("", "   ", "Docker", " ssh ", "vercel_sandbox"):
        with pytest.raises(ValueError):
            registry.register(_provider(bad))
    # A name a later Hermes keeps for itself is the plugin's to take on a host whose registry does not.
    assert registry.register(_provider("bubblewrap")) == "bubblewrap"
    first, second = _provider("Acme_Box"), _provider("acme_box")
    assert registry.register(first) == "acme_box"
    assert registry.get("ACME_BOX") is first
    generation = registry.generation
    registry.register(second)
    assert registry.get("acme_box") is second and registry.generation > generation
    scoped = _provider("acme_box")
    registry.register(scoped, scope="profile-a")
    assert registry.get("acme_box", scope="profile-a") is scoped
    assert registry.get("acme_box", scope="profile-b") is second


def test_registry_flags_fail_soft():
    class Raising:
        @property
        def strip_env_keys(self):
            raise RuntimeError("broken")

    registry = ProviderRegistry()
    registry.register(_provider("good_box"))
    registry._global["bad_box"] = Raising()
    assert "TEMPDIR_BOX_TOKEN" in registry.strip_env_keys()
    assert registry.provider_flag("bad_box", "strip_env_keys", "fallback") == "fallback"
    assert registry.provider_flag("missing", "is_remote", None) is None


def test_plugin_context_logs_rejections_and_never_raises(caplog):
    ctx = PluginContext(registry=ProviderRegistry(), plugin_name="demo")
    with caplog.at_level(logging.WARNING):
        assert ctx.register_terminal_environment_provider(object()) is None
        assert ctx.register_terminal_environment_provider(_provider("local")) is None
    assert len(ctx.rejected) == 2 and "rejected" in caplog.text
    ctx.register_tool("anything")  # other hooks are accepted and ignored
    assert ctx.other_calls == ["register_tool"]
    assert not hasattr(LegacyPluginContext(), "register_terminal_environment_provider")


def _write_plugin(root, body: str, manifest: str = "name: demo-box\nversion: 1.0.0\ndescription: d\nkind: backend\n"):
    root.mkdir()
    (root / "plugin.yaml").write_text(manifest)
    (root / "helper.py").write_text("NAME = 'demo_box'\n")
    (root / "__init__.py").write_text(textwrap.dedent(body))
    return root


PLUGIN = """
    from .helper import NAME

    def register(ctx):
        from fakes.tempdir_box.box_provider import TempdirBoxProvider
        provider = TempdirBoxProvider()
        provider.name = NAME
        ctx.register_terminal_environment_provider(provider)
"""


def test_load_a_plugin_directory_with_relative_imports(tmp_path):
    plugin = _write_plugin(tmp_path / "demo", PLUGIN)
    loaded = loader.load(str(plugin), ProviderRegistry())
    assert loaded.source == "directory" and loaded.plugin_name == "demo-box" and loaded.version == "1.0.0"
    assert loaded.provider.name == "demo_box" and loaded.is_package
    assert loaded.core_changes == [] and loaded.network_attempts == []


def test_load_module_attr_in_every_form():
    registry = ProviderRegistry()
    assert loader.load("fakes.tempdir_box:provider", registry).source == "object"
    assert loader.load("fakes.tempdir_box.box_provider:TempdirBoxProvider", registry).provider.name == "tempdir_box"
    assert loader.load("fakes.tempdir_box:register", registry).is_package
    assert loader.load("fakes.tempdir_box", registry).manifest["kind"] == "backend"


def test_load_through_an_entry_point(tmp_path, monkeypatch):
    dist = tmp_path / "kit_demo-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kit-demo\nVersion: 1.2.3\n")
    (dist / "entry_points.txt").write_text("[hermes_agent.plugins]\ntempdir-box = fakes.tempdir_box\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = loader.load("ep:tempdir-box", ProviderRegistry())
    assert loaded.source == "entry-point" and loaded.entry_point == "tempdir-box"
    assert loaded.distribution == "kit-demo" and loaded.distribution_version == "1.2.3"
    assert loaded.plugin_name == loaded.manifest["name"] == "tempdir-box"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_such_pkg_xyz", "no module 'no_such_pkg_xyz'"),
        ("fakes.tempdir_box:nothing", "has no attribute 'nothing'"),
        ("ep:not-installed", "no hermes_agent.plugins entry point named 'not-installed'"),
        ("./does/not/exist", "is not a directory"),
        ("json", "has no register(ctx)"),
    ],
)
def test_load_errors_say_what_to_do(spec, message):
    with pytest.raises(loader.LoadError, match="(?s)" + message.replace("(", r"\(").replace(")", r"\)")):
        loader.load(spec, ProviderRegistry())


def test_load_refuses_a_plugin_that_registers_nothing(tmp_path):
    plugin = _write_plugin(tmp_path / "empty", "def register(ctx):\n    ctx.register_tool('x')\n")
    with pytest.raises(loader.LoadError, match="registered no terminal provider"):
        loader.load(str(plugin), ProviderRegistry())


def test_core_override_is_detected(tmp_path):
    body = PLUGIN + "\n    import tools.environments.base as b\n    b.BaseEnvironment.execute = lambda *a, **k: {}\n"
    plugin = _write_plugin(tmp_path / "patcher", textwrap.dedent(body))
    from conformance.host.standins.base import BaseEnvironment

    original = BaseEnvironment.execute
    try:
        loaded = loader.load(str(plugin), ProviderRegistry())
    finally:
        BaseEnvironment.execute = original
    assert any("BaseEnvironment.execute replaced" in c for c in loaded.core_changes), loaded.core_changes


def test_legacy_host_load(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "conformance.host.legacy", "fakes.tempdir_box"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    eager = _write_plugin(
        tmp_path / "eager",
        "from agent.terminal_env_provider import TerminalEnvironmentProvider\ndef register(ctx):\n    pass\n",
    )
    bad = subprocess.run(
        [sys.executable, "-m", "conformance.host.legacy", str(eager)], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 1 and ("ImportError" in bad.stderr or "ModuleNotFoundError" in bad.stderr)


@pytest.mark.parametrize(
    "command, expected",
    [
        ("cd /srv && python3 -m http.server &", "cd /srv && { python3 -m http.server & }"),
        ("a || b &\nc", "a || { b & }\nc"),
        ("a && b & c", "a && { b & }; c"),
        ("sleep 1 &", "sleep 1 &"),
        ("echo 'a && b &'", "echo 'a && b &'"),
        ("(a && b &)", "(a && b &)"),
        ("a && b >/dev/null 2>&1 &", "a && { b >/dev/null 2>&1 & }"),
    ],
)
def test_compound_background_rewrite(command, expected):
    assert _rewrite_compound_background(command) == expected


def test_sudo_rewrite_counts_real_invocations(monkeypatch):
    monkeypatch.delenv("SUDO_PASSWORD", raising=False)
    assert _transform_sudo_command("sudo ls") == ("sudo ls", None)
    monkeypatch.setenv("SUDO_PASSWORD", "pw")
    command, stdin = _transform_sudo_command("X=1 sudo a && echo sudo; sudo b | grep sudo")
    assert command == "X=1 sudo -S -p '' a && echo sudo; sudo -S -p '' b | grep sudo"
    assert stdin == "pw\npw\n"


def test_bounded_collector_keeps_head_and_tail():
    sink = _BoundedOutputCollector(100)
    for i in range(1000):
        sink.append(f"{i:04d}\n")
    text, truncated = sink.render()
    assert truncated and text.startswith("0000\n") and text.endswith("0999\n")
    assert "OUTPUT TRUNCATED - 4,900 chars omitted out of 5,000 total" in text
    full = _BoundedOutputCollector(None)
    full.append("x" * 10_000)
    assert full.render() == ("x" * 10_000, False)


# --------------------------------------------------------------- BaseEnvironment.execute, as current hosts run it
def _local_env():
    """A stand-in BaseEnvironment running local bash in a private temp dir."""
    from conformance.host.standins.base import BaseEnvironment

    return features._probe_class(BaseEnvironment)()


def test_run_bash_runs_on_a_worker_thread_and_before_execute_on_the_callers():
    env = _local_env()
    try:
        assert env.execute("echo hop")["output"].strip() == "hop"
        caller = threading.get_ident()
        assert env.threads["_before_execute"] == caller
        assert env.threads["_run_bash"] != caller
    finally:
        env.cleanup()


def test_an_interrupt_on_the_callers_thread_stops_a_command_waited_for_on_a_worker():
    from conformance.host.drivers import interrupted

    env = _local_env()
    try:
        result, _ = interrupted(env, "echo started; sleep 30", after_s=0.3, timeout=30)
        assert result["returncode"] == 130 and result["output"] == "started\n\n[Command interrupted]"
        assert env.threads["_run_bash"] not in (None, threading.get_ident())
    finally:
        env.cleanup()


def test_context_variables_cross_to_the_worker_and_thread_locals_do_not():
    import contextvars

    scope: contextvars.ContextVar[str] = contextvars.ContextVar("kit_scope", default="unset")
    local = threading.local()
    seen: dict[str, str] = {}
    env = _local_env()
    run_bash = env._run_bash

    def spying_run_bash(*args, **kwargs):
        seen["context"] = scope.get()
        seen["thread-local"] = getattr(local, "value", "unset")
        return run_bash(*args, **kwargs)

    env._run_bash = spying_run_bash
    token = scope.set("caller")
    local.value = "caller"
    try:
        assert env.execute("true")["returncode"] == 0
    finally:
        scope.reset(token)
        env.cleanup()
    assert seen == {"context": "caller", "thread-local": "unset"}


def test_a_wait_that_never_returns_ends_at_the_deadline_with_124():
    env = _local_env()
    never = threading.Event()

    def stuck_wait(proc, timeout=120, **kwargs):
        kwargs["output"].append("partial\n")
        never.wait(30)
        return {"output": "late", "returncode": 0}

    env._wait_for_process = stuck_wait
    try:
        result = env.execute("sleep 20", timeout=1)
    finally:
        never.set()
        env.cleanup()
    assert result == {"output": "partial\n\n[Command timed out after 1s]", "returncode": 124}


def test_functions_and_aliases_a_command_defines_reach_the_next_command():
    env = _local_env()
    try:
        env.execute("greet() { echo \"hi $1\"; }; alias shout='echo LOUD'; export KIT_KEPT=yes; _private() { :; }")
        assert env.execute("greet you; shout; echo $KIT_KEPT")["output"].split("\n")[:3] == ["hi you", "LOUD", "yes"]
        assert env.execute("type -t _private || echo none")["output"].strip() == "none"
    finally:
        env.cleanup()


def test_fetch_file_and_realpath_have_the_current_hosts_shape(tmp_path):
    import inspect

    from conformance.host.standins.base import BaseEnvironment, FileFetchError

    params = inspect.signature(BaseEnvironment.fetch_file).parameters
    assert params["max_bytes"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["max_bytes"].default is inspect.Parameter.empty
    env = _local_env()
    try:
        source = f"{env._dir}/data.bin"
        with open(source, "wb") as fh:
            fh.write(bytes(range(256)))
        with pytest.raises(TypeError):
            env.fetch_file(source, str(tmp_path / "no-cap"))
        assert env.fetch_file(source, str(tmp_path / "copy"), max_bytes=256) is None
        assert (tmp_path / "copy").read_bytes() == bytes(range(256))
        with pytest.raises(FileFetchError, match="larger than the 255-byte limit"):
            env.fetch_file(source, str(tmp_path / "capped"), max_bytes=255)
        assert not (tmp_path / "capped").exists()
        assert env.fetch_realpath(f"{env._dir}/no/such/dir/file") is None
        assert env.fetch_realpath(source) == source
    finally:
        env.cleanup()


def test_feature_detection_tells_the_0_19_shape_from_the_current_one():
    """Detected by behaviour: a base shaped like hermes-agent 0.19.0 (spawn and wait on the
    caller's thread, exports-only re-dump, no fetch_file) lacks those three features and keeps
    the ones it composes the same way."""
    import shlex

    from conformance.host.standins.base import BaseEnvironment

    class CallerThreadShape(BaseEnvironment):
        fetch_file = None
        fetch_realpath = None

        def _wrap_command(self, command, cwd):
            snap, marker = shlex.quote(self._snapshot_path), self._cwd_marker
            return "\n".join(
                [
                    f"source {snap} >/dev/null 2>&1 || true",
                    f"builtin cd -- {shlex.quote(cwd)} || exit 126",
                    "eval " + shlex.quote(command),
                    "__ec=$?",
                    f"export -p > {snap}",
                    f"printf '\\n{marker}%s{marker}\\n' \"$(pwd -P)\"",
                    "exit $__ec",
                ]
            )

        def execute(self, command, cwd="", *, timeout=None, **kwargs):
            self._before_execute()
            proc = self._run_bash(self._wrap_command(command, cwd or self.cwd), timeout=timeout or self.timeout)
            result = self._wait_for_process(proc, timeout=timeout or self.timeout)
            self._update_cwd(result)
            return result

    old = features.detect(CallerThreadShape)
    assert not any(old[name] for name in ("exec-worker-thread", "snapshot-redumps-functions", "fetch-file")), old
    assert all(old[name] for name in ("wait-loop", "session-snapshot", "cwd-marker", "cwd-observed")), old
    assert all(features.detect(BaseEnvironment).values())


@pytest.mark.parametrize(
    "version, requires, expected",
    [
        ("0.19.0", ">=0.21.3", False),
        ("0.22.2.post1", ">=0.21.3", True),
        ("0.21.3", ">=0.21.3,<0.22", True),
        (None, ">=0.21.3", None),
        ("0.21.3", "not a range", None),
    ],
)
def test_a_release_meets_a_plugins_range_or_cannot_be_told(version, requires, expected):
    assert abi.meets(version, requires) is expected


OLD_TREE_PROBE = textwrap.dedent(
    """
    import sys
    from conformance.errors import HostError
    from conformance.host import abi
    tree = abi.installed_tree()
    print("tree", tree.version, tree.where == sys.argv[1])
    try:
        abi.install("hermes", requires=">=0.21.3")
    except HostError as exc:
        print("hermes refused:", exc.one_line())
    info = abi.install("auto", requires=">=0.21.3")
    print("auto:", info.mode, "|", info.note)
    print("imported:", "hermes_cli" in sys.modules and getattr(sys.modules["hermes_cli"], "OLD", False))
    """
)


def test_an_installed_hermes_older_than_the_plugin_asks_is_never_its_host(tmp_path):
    """--host auto takes the builtin host and says why; --host hermes is a usage error; nothing of the old
    tree runs to find that out (its version is read from its source)."""
    tree = tmp_path / "old"
    (tree / "hermes_cli").mkdir(parents=True)
    (tree / "hermes_cli" / "__init__.py").write_text('OLD = True\n__version__ = "0.19.0"\nraise SystemExit("ran")\n')
    done = subprocess.run(
        [sys.executable, "-c", OLD_TREE_PROBE, str(tree)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == "tree 0.19.0 True", done.stdout + done.stderr
    assert (
        "installed Hermes 0.19.0" in lines[1]
        and "requires_hermes '>=0.21.3'" in lines[1]
        and "--host builtin" in lines[1]
    )
    assert lines[2].startswith("auto: builtin |") and "does not meet the plugin's requires_hermes" in lines[2]
    assert lines[3] == "imported: False"


def test_comparing_hosts_may_judge_on_a_hermes_the_plugin_excludes_and_the_note_says_so(tmp_path):
    """certify --ignore-requires-hermes (host_equivalence on 0.19.0): the installed tree is the host all the
    same, and its note names the release and the range it misses."""
    probe = (
        "from conformance.host import abi\n"
        "info = abi.install('hermes', requires='>=0.21.3', ignore_requires=True)\n"
        "print(info.mode, info.hermes_version, '|', info.note)\n"
    )
    done = run_in_tree(minimal_tree(tmp_path / "old", "0.19.0"), probe)
    assert done.returncode == 0, done.stdout + done.stderr
    mode, note = done.stdout.strip().split(" | ")
    assert mode == "hermes 0.19.0"
    assert "Hermes 0.19.0 does not meet the plugin's requires_hermes '>=0.21.3'" in note
    assert "--ignore-requires-hermes" in note


def test_the_plugins_range_is_read_beside_its_package_without_importing_it(tmp_path):
    plugin = tmp_path / "ranged_box"
    plugin.mkdir()
    (plugin / "plugin.yaml").write_text('name: ranged\nkind: backend\nrequires_hermes: ">=0.21.3"\n')
    (plugin / "__init__.py").write_text("raise SystemExit('imported')\n")
    assert loader.declared_requires_hermes(str(plugin)) == ">=0.21.3"
    assert loader.declared_requires_hermes("fakes.tempdir_box") is None  # no plugin.yaml range: nothing asked
    assert loader.declared_requires_hermes("no_such_package:x") is None


def test_a_package_that_is_no_plugin_is_told_so_not_to_install_an_sdk(tmp_path, monkeypatch, builtin_host):
    """A package that patches Hermes's files (no register(), no provider) and one whose own module is
    missing each get the fix that fits them."""
    (tmp_path / "patcher").mkdir()
    (tmp_path / "patcher" / "__init__.py").write_text("PATCHED = ['tools/environments/patcher_env.py']\n")
    (tmp_path / "broken_own").mkdir()
    (tmp_path / "broken_own" / "__init__.py").write_text("import broken_own.missing_part\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(loader.LoadError) as caught:
        loader.load("patcher", ProviderRegistry())
    assert "patches Hermes's files" in caught.value.fix and "SDK" not in caught.value.fix
    with pytest.raises(loader.LoadError) as caught:
        loader.load("broken_own", ProviderRegistry())
    assert "the plugin's own module 'broken_own.missing_part' is missing" in caught.value.fix

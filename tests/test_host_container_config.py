"""The factory sends a container backend the host's full container_config, and others none."""

from __future__ import annotations

from types import SimpleNamespace

from conformance.host.factory import container_config_for
from tests.hermes_tree import minimal_tree, run_in_tree

# The 18 keys of the host's _CONTAINER_KEYS with their defaults.
HOST_KEYS = {
    "container_cpu": 1,
    "container_memory": 5120,
    "container_disk": 51200,
    "container_persistent": True,
    "modal_mode": "auto",
    "vercel_runtime": "",
    "docker_volumes": [],
    "docker_mount_cwd_to_workspace": False,
    "docker_forward_env": [],
    "docker_env": {},
    "docker_run_as_host_user": False,
    "docker_extra_args": [],
    "docker_shm_size": "1g",
    "docker_network": True,
    "docker_persist_across_processes": True,
    "docker_shared_container_key": "",
    "docker_orphan_reaper": True,
    "docker_snap_compat": False,
}


def test_a_container_backend_gets_every_key_with_the_hosts_defaults():
    config = container_config_for(SimpleNamespace(is_container=True), {})
    assert config == HOST_KEYS


def test_terminal_settings_override_the_defaults_and_nothing_else_is_sent():
    config = container_config_for(
        SimpleNamespace(is_container=True), {"container_persistent": False, "docker_env": {"A": "1"}, "timeout": 9}
    )
    assert config["container_persistent"] is False and config["docker_env"] == {"A": "1"}
    assert set(config) == set(HOST_KEYS)


def test_a_backend_that_is_not_a_container_gets_an_empty_config():
    assert container_config_for(SimpleNamespace(is_container=False), {"container_cpu": 4}) == {}


def test_a_provider_editing_its_config_does_not_change_the_next_one():
    first = container_config_for(SimpleNamespace(is_container=True), {})
    first["docker_volumes"].append("/host:/box")
    assert container_config_for(SimpleNamespace(is_container=True), {})["docker_volumes"] == []


TREE_PROBE = """
from types import SimpleNamespace
from conformance.host import abi, factory
abi.install("hermes")
config = factory.container_config_for(SimpleNamespace(is_container=True), {"vercel_image": "img"})
print(sorted(config), config["vercel_image"], config["container_cpu"])
"""


def test_on_an_installed_hermes_the_keys_come_from_its_own_factory(tmp_path):
    """A newer release's factory sends more keys (0.22 adds vercel_image and docker_image_pinned): the kit
    sends what that release's _CONTAINER_KEYS says, read from its source."""
    backends = "raise SystemExit('imported')\n_CONTAINER_KEYS = (('container_cpu', 2), ('vercel_image', ''))\n"
    tree = minimal_tree(tmp_path, "0.22.2", {"tools/terminal_tool_backends.py": backends})
    done = run_in_tree(tree, TREE_PROBE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "['container_cpu', 'vercel_image'] img 2"

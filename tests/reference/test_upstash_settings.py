"""upstash_box settings: defaults, validation and warnings, as the hermes-box README describes."""

from __future__ import annotations

import logging

import pytest

from reference.common.naming import sandbox_name
from reference.upstash_box.settings import SettingsError, resolve


def test_defaults():
    s = resolve({}, terminal={})
    assert (s.persistent, s.size, s.runtime, s.keep_alive, s.labels, s.name_prefix) == (
        True,
        "small",
        None,
        False,
        ("hermes",),
        "hermes",
    )


def test_unknown_size_falls_back_to_small_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        s = resolve({}, terminal={"upstash_box_size": "huge"})
    assert s.size == "small" and "upstash_box_size 'huge'" in caplog.text


@pytest.mark.parametrize("size", ["small", "MEDIUM", " large "])
def test_known_sizes(size):
    assert resolve({}, terminal={"upstash_box_size": size}).size == size.strip().lower()


def test_labels_from_a_list_or_a_comma_string_with_limits(caplog):
    assert resolve({}, terminal={"upstash_box_labels": "laptop, ci"}).labels == ("hermes", "laptop", "ci")
    with caplog.at_level(logging.WARNING):
        s = resolve({}, terminal={"upstash_box_labels": ["a", "b", "c", "d", "e", "x" * 21, "bad label", "hermes"]})
    assert s.labels == ("hermes", "a", "b", "c", "d")
    assert "at most 4 extra labels" in caplog.text
    assert "at most 20 characters" in caplog.text


def test_keep_alive_is_ignored_without_persistence(caplog):
    with caplog.at_level(logging.WARNING):
        s = resolve({"container_persistent": False}, terminal={"upstash_box_keep_alive": True})
    assert s.keep_alive is False and "ignored with container_persistent: false" in caplog.text
    assert resolve({}, terminal={"upstash_box_keep_alive": "true"}).keep_alive is True


def test_persistence_comes_from_container_config_then_config_yaml():
    assert resolve({"container_persistent": False}, terminal={"container_persistent": True}).persistent is False
    assert resolve({}, terminal={"container_persistent": "false"}).persistent is False


def test_image_override_is_the_runtime():
    assert resolve({}, image="python", terminal={"upstash_box_runtime": "node"}).runtime == "python"
    assert resolve({}, image="", terminal={"upstash_box_runtime": "golang"}).runtime == "golang"


def test_bad_prefix_is_an_error_that_names_the_key():
    with pytest.raises(SettingsError, match="upstash_box_name_prefix 'Bad Prefix!'"):
        resolve({}, terminal={"upstash_box_name_prefix": "Bad Prefix!"})


@pytest.mark.parametrize("task_id", ["default", "session:abc", "profile:work:s-1", "rollout/batch 3:item/7", "x" * 300])
def test_box_names_are_safe_and_distinct(task_id):
    name = sandbox_name("hermes", task_id)
    assert name.startswith("hermes-") and len(name) <= 64
    assert all(c.isalnum() or c == "-" for c in name)
    assert name != sandbox_name("hermes", task_id + "_")
    assert sandbox_name("hermes", task_id, unique=True) != sandbox_name("hermes", task_id, unique=True)

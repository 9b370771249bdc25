"""The kit tears environments down in the host's order and with the host's force_remove."""

from __future__ import annotations

from typing import Any

from conformance.host.drivers import prompt_probe
from conformance.host.lifecycle import EnvCache, cleanup_env


class Recorded:
    """An environment that logs every teardown call into a shared list."""

    def __init__(self, name: str, log: list[tuple[str, ...]]):
        self.name, self.log, self.cwd, self.timeout = name, log, "/", 10

    def execute(self, command: str, cwd: str = "", **kwargs: Any) -> dict[str, Any]:
        return {"output": "os=Linux\nkernel=6\nhome=/root\ncwd=/\nuser=root\n", "returncode": 0}

    def cleanup(self, force_remove: bool = False) -> None:
        self.log.append(("cleanup", self.name, str(force_remove)))

    def wait_for_cleanup(self, timeout: float = 15.0) -> None:
        self.log.append(("wait", self.name, str(timeout)))


class Plain(Recorded):
    def cleanup(self) -> None:  # type: ignore[override]
        self.log.append(("cleanup", self.name, "-"))


def test_shutdown_cleans_every_environment_before_waiting_on_any():
    log: list[tuple[str, ...]] = []
    cache = EnvCache(lambda task: Recorded(task, log))
    for task in ("a", "b", "c"):
        cache.acquire(task)
    killed: list[bool] = []
    cache.shutdown(timeout=15.0, kill_foreground=lambda: killed.append(True))
    assert killed == [True]
    assert log[:3] == [("cleanup", t, "False") for t in ("a", "b", "c")]
    assert log[3:] == [("wait", t, "15.0") for t in ("a", "b", "c")]
    assert not cache.errors


def test_force_remove_is_passed_only_to_a_cleanup_that_declares_it():
    log: list[tuple[str, ...]] = []
    cleanup_env(Recorded("kw", log), force_remove=True)
    cleanup_env(Plain("plain", log), force_remove=True)
    cleanup_env(Recorded("reaper", log))
    assert log == [("cleanup", "kw", "True"), ("cleanup", "plain", "-"), ("cleanup", "reaper", "False")]


def test_the_prompt_probe_tears_down_with_force_remove(builtin_host):
    log: list[tuple[str, ...]] = []
    outcome = prompt_probe(lambda task_id: Recorded(task_id, log))
    assert outcome.error is None and outcome.cleanup_error is None
    assert outcome.fields["os"] == "Linux"
    assert log == [("cleanup", "prompt-backend-probe", "True")]

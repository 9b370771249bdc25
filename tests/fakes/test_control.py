"""The control channel: what crosses it, how errors come back, who may use it."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fakes.control import (
    ControlBusy,
    ControlClient,
    ControlError,
    ControlServer,
    RemoteError,
    RemoteObject,
)


class Oops(Exception):
    pass


@dataclass
class Counter:
    hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def doubled(self) -> int:
        return 2 * self.hits

    def hit(self, times: int = 1) -> int:
        with self.lock:  # the server calls from one thread per connection
            self.hits += times
            return self.hits


@dataclass
class Served:
    counters: list[Counter] = field(default_factory=list)
    capabilities: frozenset[str] = frozenset({"world", "world-states"})
    _secret: str = "hidden"

    def echo(self, value: object) -> object:
        return value

    def counter(self) -> Counter:
        self.counters.append(Counter())
        return self.counters[-1]

    def total(self, *counters: Counter) -> int:
        return sum(c.hits for c in counters)

    def missing(self, key: str) -> None:
        raise KeyError(f"no sandbox {key!r}")

    def broken(self) -> None:
        raise Oops("the fake's own error")


@pytest.fixture
def served() -> Iterator[tuple[Served, ControlServer, ControlClient]]:
    target = Served()
    server = ControlServer(target, info={"name": "unit"}).start()
    client = ControlClient(server.address, label="unit")
    try:
        yield target, server, client
    finally:
        client.close()
        server.stop()


def test_values_cross_with_their_types(served):
    _, _, client = served
    world = client.hello()["root"]
    assert isinstance(world, RemoteObject)
    value = {
        "t": (1, "a"),
        "s": {"x"},
        "b": b"\x00\xff",
        "p": Path("/workspace/f"),
        "$odd": [None, 1.5, True],
        "n": {"inner": (2,)},
    }
    back = world.echo(value)
    assert back == {
        "t": (1, "a"),
        "s": frozenset({"x"}),
        "b": b"\x00\xff",
        "p": Path("/workspace/f"),
        "$odd": [None, 1.5, True],
        "n": {"inner": (2,)},
    }
    assert world.capabilities == {"world", "world-states"}


def test_objects_stay_in_the_serving_process_and_read_live(served):
    target, _, client = served
    world = client.hello()["root"]
    counter = world.counter()
    assert isinstance(counter, RemoteObject) and counter.hits == 0
    target.counters[0].hits = 5  # changed on the serving side: the proxy reads it again
    assert counter.hits == 5 and counter.doubled == 10
    assert counter.hit(2) == 7 and target.counters[0].hits == 7
    assert world.total(counter, world.counter()) == 7, "a reference passed back resolves to the same object"


def test_errors_come_back_as_the_same_builtin_class_or_a_remote_error(served):
    _, _, client = served
    world = client.hello()["root"]
    with pytest.raises(KeyError) as caught:
        world.missing("sb-1")
    assert caught.value.args == ("no sandbox 'sb-1'",)
    assert any("unit fake's process" in note for note in caught.value.__notes__)
    with pytest.raises(RemoteError, match="Oops: the fake's own error") as remote:
        world.broken()
    assert "Oops" in remote.value.remote_traceback
    with pytest.raises(AttributeError):
        world.no_such_attribute  # noqa: B018 - the read is the test
    assert getattr(world, "faults", None) is None


def test_only_public_names_cross(served):
    _, _, client = served
    world = client.hello()["root"]
    with pytest.raises(AttributeError):
        world._secret  # noqa: B018
    with pytest.raises(AttributeError, match="only public attributes"):
        client.get(0, "_secret")
    with pytest.raises(AttributeError, match="read-only"):
        world.capabilities = frozenset()


def test_a_wrong_token_or_address_is_refused(served):
    _, server, _ = served
    wrong = server.address.replace(server.token, "not-the-token")
    with pytest.raises(ControlError, match="refused the control token"):
        ControlClient(wrong).hello()
    for bad in ("127.0.0.1:80", "http://127.0.0.1:80", "ftp://kit:t@127.0.0.1:80"):
        with pytest.raises(ControlError, match=re.escape("looks like http://kit:TOKEN@127.0.0.1:PORT")):
            ControlClient(bad)


def test_a_gone_server_is_a_control_error_with_the_owners_explanation(served):
    _, server, _ = served
    client = ControlClient(server.address, label="unit", describe_failure=lambda: "its process exited with code 3")
    client.hello()
    server.stop()
    with pytest.raises(ControlError, match=r"cannot be reached.*exited with code 3"):
        client.hello()


def test_one_run_at_a_time_holds_the_lease(served):
    _, _, client = served
    other = os.getppid()  # a live process that is not this one
    client.request("lease", pid=other)
    with pytest.raises(ControlBusy, match=f"already serves a run in process {other}"):
        client.request("lease", pid=os.getpid())
    client.request("release", pid=other)
    client.request("lease", pid=os.getpid())
    client.request("lease", pid=os.getpid())  # the holder may claim it again


def test_many_threads_share_one_client(served):
    target, _, client = served
    world = client.hello()["root"]
    counter = world.counter()
    errors: list[BaseException] = []

    def hit() -> None:
        try:
            for _ in range(25):
                counter.hit()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and target.counters[0].hits == 200

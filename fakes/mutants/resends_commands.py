"""deepinfra, but a command whose exec call fails is sent a second time."""

from contextlib import contextmanager

from reference.deepinfra import streaming
from reference.deepinfra.provider import DeepInfraProvider

WHAT = "a failed command call is retried, so a command may run twice"
FAKE = "deepinfra"
SCOPE = "test_transport_faults"


class _ResendingClient:
    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    @contextmanager
    def stream(self, spec):
        try:
            opened = self._client.stream(spec)
            response = opened.__enter__()
        except Exception:
            opened = self._client.stream(spec)
            response = opened.__enter__()
        try:
            yield response
        finally:
            opened.__exit__(None, None, None)


class _Account:
    def __init__(self, account):
        self._account = account
        self.client = _ResendingClient(account.client)

    def __getattr__(self, name):
        return getattr(self._account, name)


_original_init = streaming.CommandRun.__init__


def _init(self, account, *args, **kwargs):
    _original_init(self, _Account(account), *args, **kwargs)  # type: ignore[arg-type]  # forwards to the real Account


streaming.CommandRun.__init__ = _init  # type: ignore[method-assign]  # the mutation
provider = DeepInfraProvider()
BREAKS = frozenset({"faults.exec-5xx-not-retried"})

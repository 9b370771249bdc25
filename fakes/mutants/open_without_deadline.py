"""upstash_box, but opening an exec session waits for the service however long it takes."""

from reference.upstash_box import session
from reference.upstash_box.provider import UpstashBoxProvider

WHAT = "a service that accepts a command and stays silent holds execute() past its timeout"
FAKE = "upstash"
SCOPE = "test_transport_faults"


def _open_and_wait(box, argv, cwd, handle, within_s):
    return box.exec.session(argv=argv, cwd=cwd, on_stdout=handle.feed, on_stderr=handle.feed)


session._open = _open_and_wait
provider = UpstashBoxProvider()
BREAKS = frozenset({"faults.silent-server"})

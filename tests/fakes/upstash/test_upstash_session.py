"""The exec session (WS /v2/box/{id}/exec-session) driven by the real SDK's sync handle."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
from upstash_box import BoxError

from .helpers import Fake, alive, eventually

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # websockets 17 about the SDK's connect()


def run(box: Any, timeout: float = 10, stdin: bytes | None = None, **kw: Any) -> tuple[int, bytes, bytes]:
    out, err = bytearray(), bytearray()
    handle = box.exec.session(on_stdout=out.extend, on_stderr=err.extend, **kw)
    assert handle.pid > 0 and handle.exec_id.startswith("exec_")
    if stdin is not None:
        handle.write(stdin)
        handle.end_stdin()
    code = handle.wait(timeout)
    handle.close()
    return code, bytes(out), bytes(err)


def test_stdout_stderr_and_exit_code(fake: Fake):
    box = fake.create()
    code, out, err = run(box, cmd="echo out; echo err >&2; exit 42")
    assert (code, out, err) == (42, b"out\n", b"err\n")


def test_binary_output_is_byte_exact(fake: Fake):
    box = fake.create()
    payload = bytes(range(256)) * 512
    box.files.write(path="blob", content=__import__("base64").b64encode(payload).decode(), encoding="base64")
    code, out, _ = run(box, cmd="cat blob; printf '\\xff\\xfe\\x00'")
    assert code == 0 and out == payload + b"\xff\xfe\x00"


def test_stdin_then_close_gives_eof(fake: Fake):
    box = fake.create()
    code, out, _ = run(box, cmd="sort", stdin=b"pear\napple\nfig\n")
    assert (code, out) == (0, b"apple\nfig\npear\n")
    blob = bytes(range(256)) * 64
    code, out, _ = run(box, argv=["cat"], stdin=blob)
    assert (code, out) == (0, blob), "stdin bytes must arrive unchanged"


def test_stdin_written_in_pieces(fake: Fake):
    box = fake.create()
    out = bytearray()
    handle = box.exec.session(cmd="while read line; do echo got:$line; done; echo eof", on_stdout=out.extend)
    handle.write("one\n")
    assert eventually(lambda: b"got:one" in out), "a line was not answered before the next was written"
    handle.write(b"two\n")
    handle.end_stdin()
    assert handle.wait(5) == 0
    assert bytes(out) == b"got:one\ngot:two\neof\n"


def test_kill_signal_reaches_the_whole_group(fake: Fake):
    box = fake.create()
    out = bytearray()
    handle = box.exec.session(cmd="sleep 30 & echo $!; wait", on_stdout=out.extend)
    assert eventually(lambda: out.endswith(b"\n"))
    child = fake.host_pid(box, int(out.strip()))
    assert child is not None and alive(child)
    handle.kill("KILL")
    assert handle.wait(5) == 137
    assert eventually(lambda: not alive(child)), "the signal did not reach the background child"


def test_term_signal_gives_143(fake: Fake):
    box = fake.create()
    handle = box.exec.session(argv=["sleep", "30"])
    handle.kill("SIGTERM")
    assert handle.wait(5) == 143


def test_int_signal_stops_a_foreground_job(fake: Fake):
    box = fake.create()
    handle = box.exec.session(argv=["sleep", "30"])
    handle.kill("INT")
    assert handle.wait(5) == 130


def test_terminate_waits_the_grace_then_kills(fake: Fake):
    box = fake.create()
    out = bytearray()
    handle = box.exec.session(
        cmd="trap 'echo term' TERM; echo ready; while true; do sleep 0.05; done", on_stdout=out.extend
    )
    assert eventually(lambda: b"ready" in out)
    started = time.monotonic()
    handle.terminate(grace_ms=400)
    handle.terminate(grace_ms=50)  # only the first terminate counts
    assert handle.wait(5) == 137
    elapsed = time.monotonic() - started
    assert 0.35 <= elapsed < 2, f"KILL came {elapsed:.2f}s after terminate(grace_ms=400)"
    assert b"term" in out, "TERM was not sent first"


def test_terminate_of_a_cooperative_process(fake: Fake):
    box = fake.create()
    handle = box.exec.session(argv=["sleep", "30"])
    started = time.monotonic()
    handle.terminate()  # the server's default grace; sleep dies on TERM at once
    assert handle.wait(5) == 143 and time.monotonic() - started < 1


def test_argv_runs_without_a_shell_and_cmd_with_one(fake: Fake):
    box = fake.create()
    _, out, _ = run(box, argv=["printf", "%s|", "a b", "$HOME", "*"])
    assert out == b"a b|$HOME|*|"
    _, out, _ = run(box, cmd="printf '%s|' \"$HOME\" $((1+2))")
    assert out == b"/home/boxuser|3|"
    _, out, _ = run(box, argv=["printf", "argv"], cmd="printf cmd")
    assert out == b"argv", "argv wins over cmd"
    for how in ({"argv": ["/no/such/program"]}, {"cmd": "/no/such/program"}):
        code, _, err = run(box, **how)
        assert code == 127 and b"No such file" in err, (how, code, err)


def test_cwd(fake: Fake):
    box = fake.create()
    assert run(box, cmd="pwd")[1] == b"/workspace/home\n", "the SDK's default cwd is the workspace"
    assert run(box, cmd="pwd", cwd="/tmp")[1] == b"/tmp\n"
    assert run(box, cmd="pwd", cwd="/home/boxuser")[1] == b"/home/boxuser\n"
    box.exec.command("mkdir -p deep/er")
    assert run(box, cmd="pwd", cwd="deep/er")[1] == b"/workspace/home/deep/er\n"
    with pytest.raises(BoxError, match="no such directory"):
        box.exec.session(cmd="pwd", cwd="/workspace/home/missing")


def test_env_overlay_drops_blocked_keys_and_does_not_leak(fake: Fake):
    box = fake.create(env={"BOX_LEVEL": "box"})
    probe = (
        "echo ${FOO-unset} ${BOX_LEVEL-unset} ${LD_PRELOAD-unset} ${LD_LIBRARY_PATH-unset} ${UPSTASH_BLOB_TOKEN:+blob}"
    )
    code, out, _ = run(
        box,
        cmd=probe,
        env=["FOO=bar=baz", "LD_PRELOAD=/tmp/evil.so", "LD_LIBRARY_PATH=/x", "not an assignment", "BOX_LEVEL=overlaid"],
    )
    assert (code, out) == (0, b"bar=baz overlaid unset unset blob\n")
    assert run(box, cmd=probe)[1] == b"unset box unset unset blob\n", "env leaked into the next session"
    _, out, _ = run(box, cmd="echo $HOME $USER; env | grep -c UPSTASH_BOX_API_KEY || true")
    assert out == b"/home/boxuser boxuser\n0\n"


def test_tty_sessions_get_a_sized_pty_with_merged_stderr(fake: Fake):
    box = fake.create()
    out = bytearray()
    handle = box.exec.session(
        cmd="tty; stty size; echo err >&2; read go; stty size", tty=True, rows=30, cols=100, on_stdout=out.extend
    )
    assert eventually(lambda: b"err" in out)
    handle.resize(40, 120)
    handle.write("go\n")
    assert handle.wait(5) == 0
    text = bytes(out).replace(b"\r\n", b"\n")
    assert text.startswith(b"/dev/pts/"), text
    assert b"30 100\nerr\n" in text and text.endswith(b"40 120\n"), text


def test_tty_stdin_close_sends_eof(fake: Fake):
    box = fake.create()
    code, out, _ = run(box, argv=["cat"], tty=True, stdin=b"line\n")
    assert code == 0 and b"line" in out


def test_concurrent_sessions_do_not_mix(fake: Fake):
    box = fake.create()
    results: dict[int, tuple[int, bytes, bytes]] = {}

    def one(i: int) -> None:
        results[i] = run(
            box, cmd=f"for n in 1 2 3; do echo s{i}-$n; echo e{i} >&2; sleep 0.05; done; exit {i}", env=[f"WHO={i}"]
        )

    threads = [threading.Thread(target=one, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    for i in range(5):
        assert results[i] == (i, f"s{i}-1\ns{i}-2\ns{i}-3\n".encode(), f"e{i}\n".encode() * 3)


def test_client_disconnect_kills_the_process_group(fake: Fake):
    box = fake.create()
    out = bytearray()
    handle = box.exec.session(cmd="sleep 30 & echo $!; wait", on_stdout=out.extend)
    assert eventually(lambda: out.endswith(b"\n"))
    child, main = fake.host_pid(box, int(out.strip())), handle.pid
    assert child is not None
    handle.close()
    assert handle.wait(1) == -1
    assert eventually(lambda: not alive(main) and not alive(child)), "the command outlived its session"


def test_detached_nohup_child_survives_and_does_not_hold_the_session(fake: Fake):
    box = fake.create()
    started = time.monotonic()
    code, out, _ = run(box, cmd="( nohup sleep 30 >/dev/null 2>&1 & echo $! ); echo done")
    elapsed = time.monotonic() - started
    assert code == 0 and out.endswith(b"done\n")
    child = fake.host_pid(box, int(out.split()[0]))
    time.sleep(0.2)
    assert child is not None and alive(child), "a detached nohup child died with its session"
    assert elapsed < 2
    os.kill(child, 9)


def test_background_child_holding_the_pipe_does_not_hold_the_session(fake: Fake):
    box = fake.create()
    started = time.monotonic()
    code, out, _ = run(box, cmd="sleep 5 & echo main-done")
    elapsed = time.monotonic() - started
    assert (code, out) == (0, b"main-done\n")
    assert elapsed < 1.5, f"the session waited {elapsed:.1f}s for a background child that kept stdout open"


def test_output_after_the_exit_is_drained(fake: Fake):
    box = fake.create()
    code, out, _ = run(box, cmd="(sleep 0.1; echo late) & echo early")
    assert code == 0 and out == b"early\nlate\n", "output written within the drain window was lost"


def test_large_output_arrives_complete(fake: Fake):
    box = fake.create()
    code, out, err = run(box, cmd="head -c 20000000 /dev/zero; head -c 3000000 /dev/zero >&2", timeout=30)
    assert code == 0 and len(out) == 20_000_000 and len(err) == 3_000_000


def test_slow_reader_gets_everything(fake: Fake):
    box = fake.create()
    got = bytearray()
    gate = threading.Event()

    def slow(data: bytes) -> None:
        gate.wait(5)
        got.extend(data)

    handle = box.exec.session(
        cmd="head -c 8000000 /dev/urandom | od -An -tx1 | head -c 9000000; echo end", on_stdout=slow
    )
    time.sleep(0.5)  # nothing is read meanwhile: the command must wait, not the server buffer
    gate.set()
    assert handle.wait(30) == 0
    assert len(got) == 9_000_004 and got.endswith(b"end\n")


# ------------------------------------------------------------------ box states
def test_paused_box_gives_an_error_frame_by_default(fake: Fake):
    box = fake.create()
    box.pause()
    with pytest.raises(BoxError, match=r"exec-session error: box \S+ is paused"):
        box.exec.session(cmd="true")


def test_paused_box_can_reject_the_upgrade(fake: Fake):
    fake.settings.paused_exec = "reject"
    box = fake.create()
    box.pause()
    with pytest.raises(BoxError, match="409"):
        box.exec.session(cmd="true")


def test_paused_box_can_auto_resume(fake: Fake):
    fake.settings.paused_exec = "resume"
    fake.world.resume_delay_s = 0.1
    box = fake.create()
    box.pause()
    assert run(box, cmd="echo up")[:2] == (0, b"up\n")
    assert box.get_status()["status"] == "idle"


def test_error_and_deleted_boxes(fake: Fake):
    box = fake.create()
    fake.world.set_state(fake.world.get(box.id), "error")  # type: ignore[arg-type]
    with pytest.raises(BoxError, match="error state"):
        box.exec.session(cmd="true")
    other = fake.create()
    fake.world.delete(fake.world.get(other.id))  # type: ignore[arg-type]
    with pytest.raises(BoxError, match="404"):
        other.exec.session(cmd="true")


def test_box_deleted_mid_session_ends_it(fake: Fake):
    box = fake.create()
    out = bytearray()
    handle = box.exec.session(cmd="echo on; sleep 30", on_stdout=out.extend)
    assert eventually(lambda: b"on" in out)
    fake.world.delete(fake.world.get(box.id))  # type: ignore[arg-type]
    assert handle.wait(5) == -1, "a session in a deleted box must end with an error, not an exit code"


def test_bad_start_frames_are_refused(fake: Fake):
    import json

    from websockets.sync.client import connect

    box = fake.create()
    url = fake.url.replace("http", "ws") + f"/v2/box/{box.id}/exec-session"
    for first in ({"type": "stdin", "data": ""}, {"type": "start", "cwd": "/"}, "not json"):
        with connect(url, additional_headers=fake.headers) as conn:
            conn.send(first if isinstance(first, str) else json.dumps(first))
            frame = json.loads(conn.recv(timeout=5))
            assert frame["type"] == "error" and frame["message"], frame


@pytest.mark.parametrize("name", ["stdout", "stderr"])
def test_output_frame_text_is_the_json_of_the_frame(name: str):
    import json

    from fakes.upstash.session import _output_frame, _output_text

    for data in (b"", b"\x00", bytes(range(256)) * 3, os.urandom(4099)):
        assert _output_text(name, data) == json.dumps(_output_frame(name, data))

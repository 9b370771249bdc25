"""The NDJSON exec stream: its shape, heartbeats, merged UTF-8 output in frames of at most 4096 units,
exit codes, cwd, login shells, stdin."""

from __future__ import annotations

import pytest

from fakes.cloudflare import BridgeServer

from .bridge_client import (
    Client,
    make_server,
    new_id,
    rid,
)


def test_exec_stream_shape(client: Client, sid: str) -> None:
    request_id = rid()
    run = client.exec(sid, "printf hello", rid=request_id)
    assert run.status == 200
    assert run.headers["content-type"] == "application/x-ndjson"
    assert run.headers["cache-control"] == "no-store"
    assert run.headers["x-content-type-options"] == "nosniff"
    assert run.raw.endswith(b"\n") and all(line for line in run.raw.split(b"\n")[:-1])
    body = [e for e in run.events if e["type"] != "heartbeat"]
    assert body == [
        {"type": "started", "request_id": request_id},
        {"type": "output", "data": "hello"},
        {"type": "exit", "exit_code": 0},
    ]


def test_heartbeats_for_the_whole_stream_and_none_after_the_end(client: Client, sid: str) -> None:
    run = client.exec(sid, "sleep 0.7; echo done")
    assert run.types.count("heartbeat") >= 2, run.types
    assert run.types[-1] == "exit" and run.output == "done\n"


def test_heartbeats_cover_a_cold_start() -> None:
    srv = make_server(startup_delay_s=0.9, heartbeat_s=0.25)
    try:
        cli = Client(srv)
        sandbox = new_id()
        cli.init(sandbox)
        run = cli.exec(sandbox, "true")
        assert run.types.index("started") >= 3, run.types
        assert run.exit_code == 0
        # warm: no boot wait any more
        assert cli.exec(sandbox, "true").types.index("started") == 0
        cli.close()
    finally:
        srv.stop()


def test_stdout_and_stderr_are_merged_in_order(client: Client, sid: str) -> None:
    run = client.exec(sid, "echo out; echo err >&2; echo out2; ls /no/such 2>&1 >/dev/null | wc -l")
    assert run.output == "out\nerr\nout2\n1\n"


def test_output_is_utf8_decoded_with_replacement(client: Client, sid: str) -> None:
    run = client.exec(sid, r"printf 'a\xffb\xe3\x81'; sleep 0.1; printf '\x82 \xf0\x9f\x98\x80 \xe3\x81'")
    assert run.output == "a\ufffdb\u3042 \U0001f600 \ufffd"
    assert client.exec(sid, "echo 日本語 🎉; exit 7").output == "日本語 🎉\n"


def test_output_frames_are_at_most_4096_utf16_units_and_never_split_a_pair(client: Client, sid: str) -> None:
    run = client.exec(
        sid,
        "printf 'a'; for i in $(seq 3000); do printf '\\xf0\\x9f\\x98\\x80'; done; head -c 9000 /dev/zero | tr '\\0' b",
    )
    pieces = [e["data"] for e in run.events if e["type"] == "output"]
    assert "".join(pieces) == "a" + "\U0001f600" * 3000 + "b" * 9000
    for piece in pieces:
        assert len(piece.encode("utf-16-le")) // 2 <= 4096
        piece.encode("utf-8")  # a split pair would leave a lone surrogate here
    assert len(pieces) >= 4


@pytest.mark.parametrize("command,code", [("exit 7", 7), ("false", 1), ("kill -9 $$", 137), ("nosuchcmd", 127)])
def test_exit_codes_pass_through(client: Client, sid: str, command: str, code: int) -> None:
    assert client.exec(sid, command).exit_code == code


def test_commands_run_in_the_configured_cwd_with_the_container_home(client: Client, server: BridgeServer) -> None:
    sandbox = new_id()
    client.init(sandbox, cwd="/workspace/deep/er")
    run = client.exec(sandbox, "pwd; echo $HOME; whoami 2>/dev/null || id -un")
    lines = run.output.splitlines()
    if server.world.namespaced:
        assert lines[:2] == ["/workspace/deep/er", "/home/hermes"]
    box = server.world.get(sandbox)
    assert box is not None and (box.workspace_dir / "deep" / "er").is_dir()


def test_a_cwd_that_cannot_be_made_is_invalid_cwd(client: Client) -> None:
    sandbox = new_id()
    client.init(sandbox, cwd="/etc/passwd/sub")
    run = client.exec(sandbox, "true")
    assert run.types == ["error"] and run.error_code == "invalid_cwd"


def test_login_selects_a_login_shell(client: Client, sid: str) -> None:
    probe = "shopt -q login_shell && echo login || echo plain"
    assert client.exec(sid, probe).output == "plain\n"
    assert client.exec(sid, probe, login=True).output == "login\n"
    assert client.exec(sid, probe, login=False).output == "plain\n"


def test_stdin_is_written_once_then_closed(client: Client, sid: str) -> None:
    run = client.exec(sid, "cat; echo; cat; echo rc=$?", stdin="abc é\n", timeout=5)
    assert run.output == "abc é\n\nrc=0\n"
    # absent or null stdin: the command sees end of input at once
    assert client.exec(sid, "cat; echo end", timeout=5).output == "end\n"
    assert client.exec(sid, "cat; echo end", stdin=None, timeout=5).output == "end\n"
    assert client.exec(sid, "wc -c", stdin="", timeout=5).output.strip() == "0"


def test_stdin_need_not_be_read(client: Client, sid: str) -> None:
    run = client.exec(sid, "echo ignored", stdin="x" * 300_000)
    assert run.exit_code == 0 and run.output == "ignored\n"

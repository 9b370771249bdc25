"""stdin: stdin_data reaches the command exactly, then EOF."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conformance.checks._support import nonce, out, rc, run, sha256_hex

pytestmark = pytest.mark.usefixtures("kit")

MIB = 1024 * 1024
# Local bash gets the locale a sandbox usually has; the consumers below are byte-oriented anyway.
LOCAL_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def _as_stdin(raw: bytes) -> str:
    """How Hermes hands bytes to execute(): a surrogateescape str."""
    return raw.decode("utf-8", "surrogateescape")


def _first_difference(got: str, want: str) -> str:
    i = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    return (
        f"lengths {len(got)} vs {len(want)}, first difference at {i}: "
        f"backend {got[max(0, i - 20) : i + 40]!r} vs expected {want[max(0, i - 20) : i + 40]!r}"
    )


# --------------------------------------------------------------------- roundtrip
ROUNDTRIP = {
    "quotes": "single ' double \" back ` end\n",
    "dollar": "$HOME ${PATH} $(echo no) `echo no` $'x' $1\n",
    "backslash": "a\\b\\\\c\\n\\t\\\n",
    "crlf": "line one\r\nline two\r\n\r\nlast\r\n",
    "unicode": "héllo wörld ✓ 日本語 🚀 \u200b\u00a0\n",
    "no-trailing-newline": "no newline at the end",
    "256k": ("kit 'q' \"dq\" $X \\ ü 🚀\r\n" * 12000)[: 256 * 1024],
}


@pytest.mark.clause("stdin.roundtrip")
def test_cat_returns_stdin_unchanged(env):
    for name, data in ROUNDTRIP.items():
        result = run(env, "cat", stdin_data=data, timeout=10)
        assert rc(result) == 0, f"cat with {name} stdin exited {rc(result)}: {out(result)[-200:]!r}"
        assert out(result) == data, (
            f"cat did not return its {name} stdin unchanged: {_first_difference(out(result), data)}"
        )


# --------------------------------------------------------------------- exact bytes
def _bytes_report(env, data: str) -> tuple[str, str]:
    """(byte count, sha256) of what the command received on stdin, taken inside the sandbox."""
    result = run(
        env,
        'f=$(mktemp) && cat > "$f" && wc -c < "$f" && sha256sum < "$f"; s=$?; rm -f "$f"; exit $s',
        stdin_data=data,
        timeout=10,
    )
    assert rc(result) == 0, f"measuring stdin failed ({rc(result)}): {out(result)[-300:]!r}"
    words = out(result).split()
    assert len(words) >= 2, f"unexpected output from wc/sha256sum: {out(result)!r}"
    return words[0], words[1]


@pytest.mark.clause("stdin.control-bytes")
def test_nul_and_control_bytes_arrive(env):
    data = "".join(map(chr, range(32))) + "\x7f" + "mid\x00dle\r\n\x1b[31mred\x1b[0m\x00\x08\x0c" * 50 + "\x00"
    raw = data.encode("utf-8")
    size, digest = _bytes_report(env, data)
    assert size == str(len(raw)), f"the command received {size} bytes of stdin, {len(raw)} were sent"
    assert digest == sha256_hex(raw), "NUL/CR/ESC/control bytes on stdin did not arrive byte for byte (sha256 differs)"


@pytest.mark.clause("stdin.surrogateescape")
def test_undecodable_bytes_arrive(env):
    raw = b"ok \xff\xfe\x80 \xc3( \xed\xa0\x80 \xf0\x9f end\n" * 100 + b"\xc3"
    size, digest = _bytes_report(env, _as_stdin(raw))
    assert size == str(len(raw)), f"the command received {size} bytes of stdin, {len(raw)} were sent"
    assert digest == sha256_hex(raw), (
        "non-UTF-8 bytes passed as a surrogateescape str did not arrive as the original bytes"
    )


@pytest.mark.clause("stdin.large")
def test_eight_mib_of_stdin(env):
    unit = "kit-large ü 🚀 'q' \"dq\" $HOME \\ tab\t end\r\n".encode()
    unit = unit + b"-" * (64 - len(unit))
    raw = unit * (8 * MIB // len(unit))
    assert len(raw) == 8 * MIB
    started = time.monotonic()
    result = run(env, "sha256sum", stdin_data=raw.decode("utf-8"), timeout=30)
    elapsed = time.monotonic() - started
    assert rc(result) == 0, f"sha256sum of 8 MiB stdin exited {rc(result)} after {elapsed:.1f}s: {out(result)[-300:]!r}"
    words = out(result).split()
    assert words and words[0] == sha256_hex(raw), f"8 MiB of stdin did not arrive exactly: sha256 {words[:1]} differs"


# --------------------------------------------------------------------- EOF
EOF_CASES = (
    ("cat; echo after-eof", "a\nb\nc", "a\nb\ncafter-eof\n"),
    ("wc -c", "a\nb\nc", "5\n"),
    ("n=0; while IFS= read -r l; do n=$((n+1)); done; echo lines=$n", "a\nb\nc\n", "lines=3\n"),
    ("cat; echo after-eof", "", "after-eof\n"),
)


@pytest.mark.clause("stdin.eof")
def test_command_sees_eof_after_stdin(env):
    for command, data, expected in EOF_CASES:
        started = time.monotonic()
        result = run(env, command, stdin_data=data, timeout=5)
        elapsed = time.monotonic() - started
        if rc(result) == 0 and out(result) == expected:
            continue
        seen = out(result)[-200:]
        if rc(result) == 124 or elapsed >= 5:
            why = "the command never saw end of file: it was still reading when its 5 s ran out"
        elif rc(result) == 0:
            why = f"the command saw end of file, but its output is not {expected!r}: stdin did not arrive as sent"
        else:
            why = "the command failed"
        raise AssertionError(
            f"{command!r} with stdin {data!r}: rc {rc(result)} after {elapsed:.1f}s, output {seen!r}; {why}"
        )


@pytest.mark.clause("stdin.none-no-hang")
def test_no_stdin_data_is_empty_stdin(env):
    started = time.monotonic()
    result = run(env, "cat; read -r line; echo read=$?; wc -c 2>/dev/null | tr -d ' '", timeout=5)
    elapsed = time.monotonic() - started
    assert rc(result) != 124 and elapsed < 4, (
        f"without stdin_data a command reading stdin hung for {elapsed:.1f}s (rc {rc(result)})"
    )
    assert "read=1" in out(result), f"read found data on an empty stdin: {out(result)!r}"


# --------------------------------------------------------------------- sudo
@pytest.mark.clause("stdin.sudo-prefix")
def test_sudo_password_precedes_caller_stdin(env, monkeypatch):
    password = nonce("sudo-pw")
    monkeypatch.setenv("SUDO_PASSWORD", password)
    caller = "caller line 1\ncaller 'two' $HOME\n"
    # A fake sudo: `function name {` is not a command position, so the host leaves it alone.  It reads
    # exactly three lines (password + the caller's two), so the check does not depend on EOF.
    result = run(
        env, "function sudo { printf 'argv:%s\\n' \"$*\"; head -n 3; }; sudo true", stdin_data=caller, timeout=10
    )
    assert rc(result) == 0, f"the fake sudo failed: {out(result)!r}"
    argv, _, received = out(result).partition("\n")
    assert received.split("\n", 1)[0] == password, (
        f"the first stdin line sudo read is {received.split(chr(10), 1)[0]!r}, not SUDO_PASSWORD ({argv})"
    )
    assert received == f"{password}\n{caller}", (
        f"after the password line sudo's stdin is {received.split(chr(10), 1)[-1]!r},"
        f" not the caller's stdin_data {caller!r}"
    )


# --------------------------------------------------------------------- property: same as local bash
# Every payload is UTF-8: bytes that are not (passed as a surrogateescape str) are the subject of the
# SHOULD clause stdin.surrogateescape, which test_undecodable_bytes_arrive checks on its own.
SPECIAL_ATOMS = (
    b"\x00",
    b"\r\n",
    b"\n",
    b"\r",
    b"\x7f",
    b"\xc3\xbf",
    b"\xef\xbf\xbd",
    b"\xf0\x9f\x9a\x80",
    b"'",
    b'"',
    b"$HOME",
    b"${x}",
    b"\\",
    b"`",
    "ü🚀".encode(),
    b"\x1b[0m",
    b"\t",
)
READ_LOOP = 'while IFS= read -r line || [ -n "$line" ]; do printf \'%s|\\n\' "$line"; done'
CONSUMERS = {
    "cat": "cat",
    "wc": "wc -c",
    "head": "head -c {n}",
    "sha256sum": "sha256sum",
    "read-loop": READ_LOOP,
}
READ_LOOP_MAX = 32 * 1024  # bash reads a pipe byte by byte; keep the loop fast

atoms = st.one_of(
    st.text(st.characters(max_codepoint=0x7F), min_size=1, max_size=24).map(str.encode),
    st.sampled_from(SPECIAL_ATOMS),
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6).map(str.encode),
)
sizes = st.one_of(st.sampled_from([0, 4095, 65537, MIB + 3, 3 * MIB + 1]), st.integers(1, 300))


def _local_bash(command: str, raw: bytes) -> tuple[str, int]:
    proc = subprocess.run(
        ["bash", "-c", command],
        input=raw,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=LOCAL_ENV,
        timeout=60,
        check=False,
    )
    return proc.stdout.decode("utf-8", "replace"), proc.returncode


@pytest.mark.clause("stdin.matches-bash")
@settings(settings.get_profile("hermes-backend-kit"), max_examples=15)
@given(
    parts=st.lists(atoms, min_size=1, max_size=6),
    size=sizes,
    consumer=st.sampled_from(sorted(CONSUMERS)),
    n=st.one_of(st.integers(0, 300), st.integers(0, 2 * MIB)),
)
@example(parts=[b"kit\x00\r\n\xc3\xbf"], size=MIB, consumer="head", n=10)  # head exits, most stdin unread
@example(parts=list(SPECIAL_ATOMS), size=3 * MIB + 1, consumer="cat", n=0)
def test_stdin_consumers_match_local_bash(env, parts, size, consumer, n):
    unit = b"".join(parts)
    if consumer == "read-loop":
        size = min(size, READ_LOOP_MAX)
    # Cut at a character boundary so the payload stays UTF-8 (the cut may split the last character).
    raw = (unit * (size // len(unit) + 1))[:size].decode("utf-8", "ignore").encode()
    command = CONSUMERS[consumer].format(n=n)
    want, want_rc = _local_bash(command, raw)
    result = run(env, command, stdin_data=_as_stdin(raw), timeout=15)
    got = out(result)
    assert got == want, (
        f"{command!r} fed {len(raw)} bytes: output differs from local bash: {_first_difference(got, want)}"
    )
    assert rc(result) == want_rc, f"{command!r} fed {len(raw)} bytes returned {rc(result)}, local bash {want_rc}"

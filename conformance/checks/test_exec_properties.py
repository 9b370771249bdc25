"""exec.matches-bash: generated commands give the output and returncode local bash gives.

The backend runs each command inside the host's wrapper (in the sandbox's
HOME, with a session snapshot), so the generated commands avoid anything that
depends on cwd, environment, locale, pids or time, and anything whose error
text carries a bash line number.
"""

from __future__ import annotations

import os
import shlex
import string
import subprocess

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conformance.checks._support import out, rc, run

pytestmark = pytest.mark.usefixtures("kit")

LOCAL_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
SPECIALS = (
    "'",
    '"',
    "$",
    "$HOME",
    "${x}",
    "\\",
    "\\n",
    "\r\n",
    "\r",
    "`",
    "%s",
    "%",
    "ü",
    "🚀",
    "日本",
    "\t",
    "!",
    "*",
    "?",
    "~",
    "#",
    "-n ",
    "\x1b[0m",
    "\u200b",
    "EOF",
)
ASCII_WORD = st.text(string.ascii_letters + string.digits, min_size=1, max_size=8)

text = st.lists(
    st.one_of(
        st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12),
        st.sampled_from(SPECIALS),
    ),
    max_size=6,
).map("".join)


def _dq(s: str) -> str:
    """s inside double quotes, with every expansion escaped."""
    return '"' + "".join("\\" + c if c in '\\"$`' else c for c in s) + '"'


def _heredoc(s: str) -> str:
    # Hermes's own rewrites (sudo, "A && B &") do not know heredocs, so the body avoids '&'.
    body = "\n".join(line for line in s.replace("&", "+").split("\n") if line != "KIT_EOF")
    return f"{{ cat <<'KIT_EOF'\n{body}\nKIT_EOF\n}}"


fragments = st.one_of(
    text.map(lambda s: f"printf '%s' {shlex.quote(s)}"),
    text.map(lambda s: f"printf '%s\\n' {_dq(s)}"),
    text.map(lambda s: f"echo {shlex.quote(s)}"),
    text.map(lambda s: f'v={shlex.quote(s)}; printf \'[%s]\' "$v" "$v"'),
    text.map(lambda s: f"cat <<< {shlex.quote(s)}"),
    text.map(_heredoc),
    st.lists(st.sampled_from(["a", "\\n", "\\t", "\\\\", "%%", "\\r", "\\x41", "\\101", "Z"]), max_size=8).map(
        lambda parts: f"printf {shlex.quote(''.join(parts))}"
    ),
    st.tuples(st.integers(-(10**6), 10**6), st.integers(-999, 999), st.integers(0, 99)).map(
        lambda t: f"echo $(( {t[0]} * {t[1]} + {t[2]} ))"
    ),
    st.integers(0, 255).map(lambda c: f"(exit {c}); echo rc=$?"),
    st.sampled_from(["true", "false", "false || echo recovered", "true && echo chained"]),
    st.tuples(st.integers(0, 3 * 1024 * 1024), st.sampled_from(string.ascii_letters + string.digits)).map(
        lambda t: f"head -c {t[0]} /dev/zero | tr '\\0' {t[1]}"
    ),
    st.tuples(ASCII_WORD | text, st.integers(0, 30_000)).map(lambda t: f"yes {shlex.quote(t[0])} | head -n {t[1]}"),
    st.tuples(st.integers(-50, 50), st.integers(0, 200_000)).map(lambda t: f"seq {t[0]} {t[1]}"),
)
endings = st.one_of(st.just(""), st.integers(0, 255).map(lambda c: f"exit {c}"))
separators = st.sampled_from(["; ", "\n", " && ", " || "])


@st.composite
def commands(draw) -> str:
    parts = draw(st.lists(fragments, min_size=1, max_size=4))
    command = parts[0]
    for part in parts[1:]:
        command += draw(separators) + part
    ending = draw(endings)
    return f"{command}\n{ending}" if ending else command


def _local_bash(command: str) -> tuple[str, int]:
    proc = subprocess.run(
        ["bash", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=LOCAL_ENV,
        timeout=60,
        check=False,
    )
    return proc.stdout.decode("utf-8", "replace"), proc.returncode


@pytest.mark.clause("exec.matches-bash")
@settings(settings.get_profile("hermes-backend-kit"), max_examples=25)
@given(command=commands())
@example(command="printf '%s' 'it'\"'\"'s $HOME `x` \\ \r\n ü🚀'\nexit 7")
@example(command="head -c 2097152 /dev/zero | tr '\\0' k; printf 'end'")
def test_commands_match_local_bash(env, command):
    want, want_rc = _local_bash(command)
    result = run(env, command, timeout=60)
    got = out(result)
    if got != want:
        i = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
        raise AssertionError(
            f"output of {command[:200]!r} differs from local bash: lengths {len(got)} vs {len(want)}, first "
            f"difference at {i}: backend {got[max(0, i - 30) : i + 50]!r} vs bash {want[max(0, i - 30) : i + 50]!r}"
        )
    assert rc(result) == want_rc, f"{command[:200]!r} returned {rc(result)}, local bash {want_rc}"

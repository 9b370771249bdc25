"""Stand-in for the two ``tools.terminal_tool`` helpers BaseEnvironment.execute uses.

- ``_rewrite_compound_background``: ``A && B &`` becomes ``A && { B & }`` so the
  backgrounded B does not keep a subshell (and its stdout) alive.
- ``_transform_sudo_command``: with SUDO_PASSWORD set, each real ``sudo`` word
  becomes ``sudo -S -p ''`` and the password lines are returned as stdin.

Both work on a small shell tokenizer that understands quotes, escapes,
comments, subshells and brace groups; it only has to be right at depth 0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import overload

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _skip_quoted(command: str, i: int) -> int:
    """Return the index just past the quoted string starting at ``i``."""
    quote = command[i]
    i += 1
    while i < len(command):
        ch = command[i]
        if quote == '"' and ch == "\\":
            i += 2
            continue
        if ch == quote:
            return i + 1
        i += 1
    return i


def _word_end(command: str, i: int) -> int:
    while i < len(command):
        ch = command[i]
        if ch.isspace() or ch in ";&|()<>":
            return i
        if ch in "'\"":
            i = _skip_quoted(command, i)
            continue
        if ch == "\\":
            i += 2
            continue
        i += 1
    return i


def _tokens(command: str) -> Iterator[tuple[str, int, int, int]]:
    """Yield (kind, start, end, depth) for words and operators at any depth."""
    i, depth, n = 0, 0, len(command)
    at_command_start = True
    while i < n:
        ch = command[i]
        if ch == "\n":
            yield ("newline", i, i + 1, depth)
            at_command_start = True
            i += 1
            continue
        if ch.isspace():
            i += 1
            continue
        if ch == "#" and at_command_start:
            end = command.find("\n", i)
            i = n if end == -1 else end
            continue
        for op in ("&&", "||", ";;", "&>", ">&", "<&", ">>", "|&"):
            if command.startswith(op, i):
                yield ("op", i, i + 2, depth)
                at_command_start = op in ("&&", "||", ";;", "|&")
                i += 2
                break
        else:
            if ch == "$" and command.startswith("$(", i):
                depth += 1
                yield ("open", i, i + 2, depth)
                at_command_start = True
                i += 2
            elif ch == "(":
                depth += 1
                yield ("open", i, i + 1, depth)
                at_command_start = True
                i += 1
            elif ch == ")":
                yield ("close", i, i + 1, depth)
                depth = max(0, depth - 1)
                at_command_start = False
                i += 1
            elif ch in ";&|<>":
                yield ("op", i, i + 1, depth)
                at_command_start = ch in ";&|"
                i += 1
            else:
                end = _word_end(command, i)
                word = command[i:end]
                kind = "cmdword" if at_command_start else "word"
                yield (kind, i, end, depth)
                keyword = word in ("{", "then", "do", "else", "elif", "!", "time")
                at_command_start = keyword or bool(at_command_start and _ASSIGNMENT.match(word))
                i = end


def _rewrite_compound_background(command: str) -> str:
    brace_depth = 0
    chain_end = -1
    edits: list[tuple[int, int]] = []
    for kind, start, end, depth in _tokens(command):
        text = command[start:end]
        if kind == "cmdword" and text == "{":
            brace_depth += 1
        elif kind in ("cmdword", "word") and text == "}":
            brace_depth = max(0, brace_depth - 1)
        if depth or brace_depth:
            continue
        if kind == "newline" or (kind == "op" and text in (";", ";;")):
            chain_end = -1
        elif kind == "op" and text in ("&&", "||"):
            chain_end = end
        elif kind == "op" and text == "&":
            if chain_end != -1:
                edits.append((chain_end, start))
            chain_end = -1
    for chain_at, amp_at in reversed(edits):
        rest = command[amp_at + 1 :]
        line_rest = rest.split("\n", 1)[0]
        closer = "& };" if line_rest.strip() else "& }"
        command = command[:chain_at] + " {" + command[chain_at:amp_at] + closer + rest
    return command


@overload
def _transform_sudo_command(command: str) -> tuple[str, str | None]: ...
@overload
def _transform_sudo_command(command: None) -> tuple[None, None]: ...
def _transform_sudo_command(command: str | None) -> tuple[str | None, str | None]:
    if command is None:
        return None, None
    spans = [(s, e) for kind, s, e, _ in _tokens(command) if kind == "cmdword" and command[s:e] == "sudo"]
    if not spans or "SUDO_PASSWORD" not in os.environ:
        return command, None
    for start, end in reversed(spans):
        command = command[:start] + "sudo -S -p ''" + command[end:]
    return command, (os.environ["SUDO_PASSWORD"] + "\n") * len(spans)

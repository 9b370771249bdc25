"""Bad input from the wire, named: JSON that does not parse or nests too deeply, strings with NUL bytes.

Each check raises ``BadInput`` with a message that names the problem (and
where it is); the vendor fakes turn it into their own 400.  Nothing here
knows HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


class BadInput(ValueError):
    """Input the fake refuses; the message says what is wrong with it."""


def parse_json(raw: bytes | str, *, max_depth: int, what: str = "the request body") -> Any:
    """``raw`` as JSON, refused if it is not JSON or nests arrays and objects deeper than ``max_depth``."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise BadInput(f"{what} nests JSON arrays and objects deeper than {max_depth} levels")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"{what} is not valid JSON: {exc}")
    if depth(value) > max_depth:
        raise BadInput(f"{what} nests JSON arrays and objects deeper than {max_depth} levels")
    return value


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Sequence[Any] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


def no_nul(value: str, what: str) -> str:
    """``value`` unless it holds a NUL byte, which no command, argument, variable or path can carry."""
    if "\0" in value:
        raise BadInput(f"{what} contains a NUL byte; commands, arguments, variables and paths cannot hold one")
    return value


def argv_without_nul(argv: Sequence[str], what: str = "command") -> list[str]:
    for i, arg in enumerate(argv):
        no_nul(arg, f"{what}[{i}]")
    return list(argv)


def argv_field(body: Any, key: str = "command") -> list[str] | None:
    """``body[key]`` as an argv: None unless it is a non-empty list of strings (the vendor says how it
    refuses that); BadInput if an argument holds a NUL byte."""
    argv = body.get(key) if isinstance(body, dict) else None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return None
    return argv_without_nul(argv, key)

"""box.env: Box Lite's settings, one ``KEY=VALUE`` a line.

The file lives at ``config_dir/box.env`` and is read before a box is created
or repaired; provisioning copies it read-only to ``/etc/hermes-box.env`` in
each box.  Syntax, as a shell would read it: blank lines and ``#`` comments are
ignored, ``export KEY=VALUE`` is accepted, a value may be in single quotes
(taken literally) or double quotes (``\\"``, ``\\\\``, ``\\$`` and ``\\n``
escapes), and an unquoted value ends at `` #``.  Every key must be one this
module knows and every value must be usable: anything else is a BadInput
naming the file, the line and the fix.  A missing file means the defaults.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from reference.box_lite.errors import BadInput

TRUE = ("on", "1", "true", "yes")
FALSE = ("off", "0", "false", "no")

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


class Invalid(Exception):
    """A parser's complaint: (what is wrong with the value, the fix)."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


def parse_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise Invalid("is not on or off", "write on or off (also 1/0, true/false, yes/no)")


def parse_size(text: str) -> int:
    """Bytes from ``123``, ``512M``, ``8G``, ``1.5GiB`` (binary units)."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise Invalid("is not a size", "write a number of bytes or one with a unit: 512M, 8G, 1T")
    unit = (match.group(2) or "").lower()[:1]
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise Invalid("must be more than zero", "write a size such as 8G")
    return value


def _seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text.strip().removesuffix("s"))
        except ValueError:
            raise Invalid("is not a number of seconds", f"write a number from {low:g} to {high:g}")
        if not low <= value <= high:
            raise Invalid(f"is outside {low:g}..{high:g} seconds", f"write a number from {low:g} to {high:g}")
        return value

    return parse


def _positive(what: str, fix: str) -> Callable[[str], float]:
    """A parser of a number above zero (of ``what``: days, CPUs); ``fix`` says what to write."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise Invalid(f"is not a number of {what}", fix)
        if value <= 0:
            raise Invalid("must be more than zero", fix)
        return value

    return parse


_days = _positive("days", "write a number of days such as 7")
_cpus = _positive("CPUs", "write a number such as 1 or 1.5, or off")


def _off_or(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A limit's parser: ``off`` (None) or what ``parse`` reads."""

    def parse_limit(text: str) -> Any:
        return None if text.strip().lower() in FALSE else parse(text)

    return parse_limit


def _count(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise Invalid("is not a whole number", "write a number of processes such as 512, or off")
    if value < 16:
        raise Invalid("is below 16", "a box needs a few processes of its own: write 16 or more, or off")
    return value


def _memory(text: str) -> int:
    value = parse_size(text)
    if value < 16 * 1024**2:
        raise Invalid("is below 16M", "write a size such as 512M or 4G, or off")
    return value


def _port(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise Invalid("is not a port number", "write a TCP port from 1 to 65535")
    if not 1 <= value <= 65535:
        raise Invalid("is outside 1..65535", "write a TCP port from 1 to 65535")
    return value


def _workload(text: str) -> str | None:
    """``off`` (None), ``executor`` or a command line for ``sh -c`` in the box."""
    value = text.strip()
    return None if not value or value.lower() in FALSE else value


def _http_path(text: str) -> str | None:
    """The MCP endpoint's path (``/mcp``), or ``off`` (None): the workload is no MCP server."""
    value = text.strip()
    if value.lower() in FALSE:
        return None
    if not value.startswith("/") or any(c.isspace() or c in "?#" for c in value):
        raise Invalid("is not an HTTP path", "write a path such as /mcp, or off when the workload is no MCP server")
    return value


def _shell(text: str) -> str:
    value = text.strip()
    if not value.startswith("/") or any(c.isspace() for c in value):
        raise Invalid("is not an absolute path", "write the shell's path inside the box, such as /bin/bash")
    return value


def _base_image(text: str) -> str:
    """``host``, or the absolute path of a root file system directory or tarball on this machine."""
    value = text.strip()
    if value == "host":
        return value
    if not value.startswith("/"):
        raise Invalid(
            "is neither host nor an absolute path",
            "write host, or the absolute path of a root file system directory or tarball (see docs/box-lite.md)",
        )
    return value


def _node_major(text: str) -> int | None:
    if text.strip().lower() in FALSE:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise Invalid("is not a Node.js major version", "write a major version such as 18 or 20, or off")
    if not 10 <= value <= 99:
        raise Invalid("is not a Node.js major version", "write a major version such as 18 or 20, or off")
    return value


@dataclass(frozen=True)
class Key:
    """One known setting: its default (as written in box.env), parser and one-line meaning."""

    name: str
    default: str
    parse: Callable[[str], Any]
    help: str


KEYS: dict[str, Key] = {
    key.name: key
    for key in (
        Key("NETWORK", "on", parse_bool, "on: boxes share the host's network; off: only loopback inside"),
        Key(
            "SAVE_SIZE_LIMIT",
            "16G",
            parse_size,
            "largest /data that save archives and load/extract unpack (bytes or 512M, 8G, ...)",
        ),
        Key("DOCTOR_TIMEOUT", "5", _seconds(1, 60), "seconds the whole doctor may take"),
        Key("STOP_TIMEOUT", "5", _seconds(0.5, 120), "seconds stop waits for processes before killing them"),
        Key("SHELL", "/bin/bash", _shell, "the login shell `enter` and the tmux session run in the box"),
        Key("BACKUP_MAX_AGE_DAYS", "7", _days, "doctor warns when a box's most recent backup is older"),
        Key("TMUX", "on", parse_bool, "on: `enter` attaches a persistent tmux session; off: a plain login shell"),
        # The box's machine: its base image and what provisioning installs in its tools layer (machine.py).
        Key(
            "BASE_IMAGE", "host", _base_image, "host (the host's system, read-only), or a root file system dir/tarball"
        ),
        Key("INSTALL_HERMES", "off", parse_bool, "on: install hermes-agent from PyPI in the tools layer"),
        Key("NODE_MAJOR", "off", _node_major, "Node.js major version to install from the base's packages, or off"),
        Key("INSTALL_CLAUDE", "off", parse_bool, "on: install Claude Code (npm) in the tools layer"),
        Key("INSTALL_CODEX", "off", parse_bool, "on: install Codex (npm) in the tools layer"),
        Key("INSTALL_NEOVIM", "off", parse_bool, "on: install Neovim from the base's packages"),
        Key("INSTALL_EXECUTOR", "off", parse_bool, "on: install Executor (npm) in the tools layer"),
        Key("PIDS_MAX", "off", _off_or(_count), "most processes (and threads) a box may have at once, or off"),
        Key("MEMORY_MAX", "off", _off_or(_memory), "most memory a box's processes may use (512M, 4G, ...), or off"),
        Key("CPU_MAX", "off", _off_or(_cpus), "most CPU time a box may use, in CPUs (1, 1.5, ...), or off"),
        # The supervised workload, its forwarded endpoint and its MCP wiring (workload.py, endpoint.py).
        Key("WORKLOAD", "off", _workload, "the box's supervised service: executor, a command line for sh -c, or off"),
        Key("WORKLOAD_PORT", "4788", _port, "the TCP port the workload listens on inside the box (its loopback)"),
        Key("WORKLOAD_MCP_PATH", "/mcp", _http_path, "the workload's MCP endpoint path, or off if it is no MCP server"),
        Key(
            "EXPOSE_EXECUTOR_WEB", "off", parse_bool, "on: a host loopback port forwards to the workload (token needed)"
        ),
        Key("EXECUTOR_PORT_LO", "18700", _port, "lowest host loopback port given to a box's forwarded endpoint"),
        Key("EXECUTOR_PORT_HI", "18799", _port, "highest host loopback port given to a box's forwarded endpoint"),
        Key(
            "WIRE_EXECUTOR_MCP",
            "on",
            parse_bool,
            "on: new and repair register the workload's MCP with Claude and Codex",
        ),
    )
}


@dataclass(frozen=True)
class Settings:
    """The parsed box.env: typed values for every known key, and the text the file gave."""

    network: bool = True
    save_size_limit: int = 16 * 1024**3
    doctor_timeout: float = 5.0
    stop_timeout: float = 5.0
    shell: str = "/bin/bash"
    backup_max_age_days: float = 7.0
    tmux: bool = True
    base_image: str = "host"
    install_hermes: bool = False
    node_major: int | None = None
    install_claude: bool = False
    install_codex: bool = False
    install_neovim: bool = False
    install_executor: bool = False
    pids_max: int | None = None
    memory_max: int | None = None
    cpu_max: float | None = None
    workload: str | None = None
    workload_port: int = 4788
    workload_mcp_path: str | None = "/mcp"
    expose_executor_web: bool = False
    executor_port_lo: int = 18700
    executor_port_hi: int = 18799
    wire_executor_mcp: bool = True
    values: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = None

    @classmethod
    def load(cls, path: Path) -> Settings:
        """The settings in ``path``; the defaults when it does not exist."""
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            return cls(source=None)
        except UnicodeDecodeError:
            raise BadInput(f"{path} is not UTF-8 text", "box.env holds KEY=VALUE lines", f"rewrite {path} as text")
        except OSError as exc:
            raise BadInput(f"cannot read {path}", exc.strerror or str(exc), f"check the file's permissions: {path}")
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text: str, source: Path | None = None) -> Settings:
        where = str(source) if source is not None else "box.env"
        raw = parse_env(text, where)
        values: dict[str, Any] = {}
        for key, (lineno, value) in raw.items():
            spec = KEYS.get(key)
            if spec is None:
                near = difflib.get_close_matches(key, list(KEYS), n=1)
                hint = f"did you mean {near[0]}? " if near else ""
                raise BadInput(
                    f"{where} line {lineno}: unknown setting {key}",
                    "only known settings are accepted",
                    f"{hint}remove the line or use one of: {', '.join(KEYS)}",
                )
            try:
                values[key.lower()] = spec.parse(value)
            except Invalid as exc:
                shown = value if len(value) <= 60 else value[:60] + "..."
                raise BadInput(f"{where} line {lineno}: {key}={shown!r} {exc.problem}", spec.help, exc.fix)
        lo, hi = values.get("executor_port_lo", 18700), values.get("executor_port_hi", 18799)
        if lo > hi:
            line = raw.get("EXECUTOR_PORT_LO", raw.get("EXECUTOR_PORT_HI", (0, "")))[0]
            raise BadInput(
                f"{where} line {line}: EXECUTOR_PORT_LO ({lo}) is above EXECUTOR_PORT_HI ({hi})",
                "the two bound the range of host ports given to forwarded endpoints",
                "make EXECUTOR_PORT_LO the lower bound",
            )
        return cls(**values, values={k: v for k, (_, v) in raw.items()}, source=source)

    def as_env(self) -> dict[str, str]:
        """Every known key with its effective value, as box.env text values (the box's copy)."""
        out: dict[str, str] = {}
        for f in fields(self):
            if f.name.upper() in KEYS:
                value = getattr(self, f.name)
                if value is None:
                    out[f.name.upper()] = "off"
                else:
                    out[f.name.upper()] = ("on" if value else "off") if isinstance(value, bool) else _text(value)
        return out

    def render(self) -> str:
        """The effective settings as box.env text (what boxes get at /etc/hermes-box.env)."""
        lines = ["# Box Lite settings in effect (managed copy; edit the host's box.env and run repair)"]
        lines += [f"{key}={_quoted(value)}" for key, value in self.as_env().items()]
        return "\n".join(lines) + "\n"


def _quoted(value: str) -> str:
    """``value`` as box.env text that parses back to it (a command line may hold quotes and spaces)."""
    if not any(c.isspace() or c in "\"'#\\$`" for c in value):
        return value
    if "'" not in value and "\n" not in value:
        return f"'{value}'"
    escaped = "".join("\\" + c if c in '"\\$`' else ("\\n" if c == "\n" else c) for c in value)
    return f'"{escaped}"'


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def default_file_text() -> str:
    """A commented box.env with every known setting at its default (written by `new` when absent)."""
    lines = ["# hermes-box settings: KEY=VALUE, one a line; '#' starts a comment.", ""]
    for key in KEYS.values():
        lines += [f"# {key.help}", f"#{key.name}={key.default}", ""]
    return "\n".join(lines)


def parse_env(text: str, where: str = "box.env") -> dict[str, tuple[int, str]]:
    """``{KEY: (line number, value)}`` from box.env text; a malformed line is a BadInput."""
    out: dict[str, tuple[int, str]] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export ") or stripped.startswith("export\t"):
            stripped = stripped[len("export") :].lstrip()
        key, sep, rest = stripped.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key) or key != key.upper():
            raise BadInput(
                f"{where} line {lineno} is not KEY=VALUE",
                "each line is an upper-case KEY, '=', then the value (or a '#' comment)",
                f"fix or remove line {lineno}",
            )
        if key in out:
            raise BadInput(
                f"{where} line {lineno}: {key} is set twice (first on line {out[key][0]})",
                "a setting may appear once",
                "keep one of the two lines",
            )
        try:
            value = _value(rest.strip())
        except Invalid as exc:
            raise BadInput(
                f"{where} line {lineno}: {key}'s value {exc.problem}", "box.env is read as a shell would", exc.fix
            )
        out[key] = (lineno, value)
    return out


_ESCAPES = {'"': '"', "\\": "\\", "$": "$", "`": "`", "n": "\n"}


def _value(text: str) -> str:
    if not text:
        return ""
    quote = text[0]
    if quote == "'":
        end = text.find("'", 1)
        if end < 0:
            raise Invalid("has no closing single quote", "end the value with '")
        _only_comment(text[end + 1 :])
        return text[1:end]
    if quote == '"':
        chars: list[str] = []
        i = 1
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPES:
                chars.append(_ESCAPES[text[i + 1]])
                i += 2
                continue
            if c == '"':
                _only_comment(text[i + 1 :])
                return "".join(chars)
            chars.append(c)
            i += 1
        raise Invalid("has no closing double quote", 'end the value with "')
    value = re.split(r"\s+#", text, maxsplit=1)[0].strip()
    if any(c in value for c in "\"'"):
        raise Invalid("has a quote inside an unquoted value", "quote the whole value or remove the quote")
    return value


def _only_comment(rest: str) -> None:
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise Invalid("has text after its closing quote", "put the whole value inside the quotes")

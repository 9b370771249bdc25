"""Which requests of a backend's own client play which fault role, told by a route table.

The transport-fault checks arm faults by role (``create``, ``exec``, ``read``;
fakes/fault_script.py).  A fake knows its own routes; a client-side injector
(conformance/client_faults.py) sees only the requests a backend's client
makes, so it needs a table saying which of them is which role.  Guessing
from methods alone is wrong too often to certify on: GETs include file
downloads that are not state reads, and a POST may create a sandbox, run a
command, pause, or upload a file; arming "429, retry me" on a command call
taken for a create would judge the backend by the wrong rule.  So roles come
from a table written from the vendor's API: the kit ships one per vendor it
knows (the same routes its fakes serve), and a vendor with another service
writes its own in YAML::

    vendor: acme
    routes:
      create: ["POST /v1/boxes"]
      exec:   ["POST /v1/boxes/{id}/exec", "WS /v1/boxes/{id}/shell"]
      read:   ["GET /v1/boxes/{id}", "GET /v1/boxes"]
      ignore: ["GET /v1/boxes/catalog"]

A route is ``METHOD /path``; each ``{name}`` matches one path segment and
``{id}`` is the sandbox id (what ``arm(..., sandbox=...)`` matches).  The path
must match whole (no prefix, query ignored).  Method ``WS`` is a WebSocket
connection, seen by the fault proxy (conformance/fault_proxy.py): on plain
ws:// its path is matched; over TLS (wss://) the proxy sees no path, and a
connection matches the table's WebSocket routes only when they all have one
role.  ``ignore`` lists routes that are no role although a less specific
route would match them; when several routes match, the one with the most
literal segments wins.

A backend whose commands travel over a protocol of its own (SSH, a raw TCP
service) names its endpoint instead: ``tcp:HOST:PORT`` is a table whose one
route is every TCP connection to that endpoint, in role ``exec``; the kit
puts a loopback TCP proxy in front of it (conformance/client_faults.py).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from conformance.errors import RouteTableError, file_problem, yaml_problem

ROLES = ("create", "exec", "read")
IGNORE = "ignore"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "WS")
FORMAT = "the format is in conformance/fault_routes.py"
TCP_PREFIX = "tcp:"
# What a run with tcp:HOST:PORT exports (its TCP proxy's address), for --backend-config env values (${NAME}).
TCP_PROXY_VAR = "HERMES_KIT_TCP_PROXY"  # 127.0.0.1:PORT
TCP_PROXY_HOST_VAR = "HERMES_KIT_TCP_PROXY_HOST"
TCP_PROXY_PORT_VAR = "HERMES_KIT_TCP_PROXY_PORT"
TCP_PROXY_VARS = (TCP_PROXY_VAR, TCP_PROXY_HOST_VAR, TCP_PROXY_PORT_VAR)


def run_variables(setting: str | None) -> tuple[str, ...]:
    """The variables a run with this --client-faults setting exports itself (before --backend-config is read)."""
    return TCP_PROXY_VARS if setting is not None and setting.startswith(TCP_PREFIX) else ()


# The vendors' routes, from their API references (the kit's fakes serve the same routes).
VENDOR_ROUTES: dict[str, dict[str, tuple[str, ...]]] = {
    "upstash": {
        "create": ("POST /v2/box",),
        "exec": ("WS /v2/box/{id}/exec-session", "POST /v2/box/{id}/exec", "POST /v2/box/{id}/exec-stream"),
        "read": ("GET /v2/box/{id}", "GET /v2/box/{id}/status", "GET /v2/box"),
    },
    "deepinfra": {
        "create": ("POST /v1/sandboxes",),
        "exec": ("POST /v1/sandboxes/{id}/exec",),
        "read": ("GET /v1/sandboxes/{id}", "GET /v1/sandboxes"),
        IGNORE: ("GET /v1/sandboxes/catalog",),
    },
    "cloudflare": {
        "create": ("POST /v1/sandboxes/{id}",),
        "exec": ("POST /v1/sandboxes/{id}/exec",),
        "read": ("GET /v1/sandboxes/{id}", "GET /health"),
    },
}

_PLACEHOLDER = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")


@dataclass(frozen=True)
class Route:
    text: str  # as written, e.g. "POST /v2/box/{id}/exec": the fault registry's route key
    method: str
    segments: tuple[str, ...]
    role: str  # one of ROLES, or IGNORE

    @classmethod
    def parse(cls, text: str, role: str, where: str) -> Route:
        parts = str(text).split()
        if len(parts) != 2 or parts[0].upper() not in METHODS or not parts[1].startswith("/"):
            raise RouteTableError(
                f"{where}: route {text!r} must be 'METHOD /path' with METHOD one of {', '.join(METHODS)}",
                "write it like 'POST /v1/sandboxes/{id}/exec'",
            )
        method, path = parts[0].upper(), parts[1]
        segments = tuple(s for s in path.split("/") if s)
        for segment in segments:
            if ("{" in segment or "}" in segment) and not _PLACEHOLDER.match(segment):
                raise RouteTableError(
                    f"{where}: route {text!r}: a placeholder is a whole segment like {{id}}, not {segment!r}",
                    "make the placeholder a segment of its own",
                )
        return cls(f"{method} {path}", method, segments, role)

    @property
    def literal(self) -> int:
        return sum(1 for s in self.segments if not _PLACEHOLDER.match(s))

    def match(self, method: str, path: str) -> dict[str, str] | None:
        """The placeholders' values when ``method path`` is this route, else None."""
        if method.upper() != self.method:
            return None
        segments = [s for s in path.split("?", 1)[0].split("/") if s]
        if len(segments) != len(self.segments):
            return None
        values: dict[str, str] = {}
        for want, got in zip(self.segments, segments, strict=True):
            placeholder = _PLACEHOLDER.match(want)
            if placeholder:
                values[placeholder.group(1)] = got
            elif want != got:
                return None
        return values


@dataclass(frozen=True)
class Match:
    route: Route
    sandbox: str | None


@dataclass(frozen=True)
class RouteTable:
    name: str  # the vendor, the file the table came from, or tcp:HOST:PORT
    routes: tuple[Route, ...]
    tcp_target: tuple[str, int] | None = None  # tcp:HOST:PORT: the endpoint the kit's TCP proxy forwards to

    def classify(self, method: str, path: str) -> Match | None:
        """The most specific route ``method path`` matches (its role may be IGNORE), or None."""
        best: tuple[Route, dict[str, str]] | None = None
        for route in self.routes:
            values = route.match(method, path)
            if values is not None and (best is None or route.literal > best[0].literal):
                best = (route, values)
        if best is None:
            return None
        return Match(best[0], best[1].get("id"))

    def opaque_websocket(self) -> tuple[Route, ...]:
        """The WebSocket routes a connection whose path cannot be seen (TLS) counts as: all of them when
        they share one role, else none (the role would be a guess)."""
        ws = tuple(r for r in self.routes if r.method == "WS" and r.role != IGNORE)
        return ws if len({r.role for r in ws}) == 1 else ()

    def role_routes(self) -> dict[str, tuple[str, ...]]:
        """Role -> route keys, the shape fakes/fault_script.FaultScript takes."""
        return {role: tuple(r.text for r in self.routes if r.role == role) for role in ROLES}

    def describe(self, role: str) -> str:
        return ", ".join(r.text for r in self.routes if r.role == role) or "none"


def build(name: str, routes: dict[str, object], where: str) -> RouteTable:
    """A table from ``{role: [route, ...]}``; every problem is an error naming the entry."""
    if not isinstance(routes, dict):
        raise RouteTableError(
            f"{where}: 'routes' is not a mapping", f"map roles ({', '.join(ROLES)}, {IGNORE}) to lists of routes"
        )
    unknown = sorted(set(routes) - {*ROLES, IGNORE})
    if unknown:
        raise RouteTableError(
            f"{where}: unknown role(s) {', '.join(map(str, unknown))}",
            f"use the roles {', '.join(ROLES)} (and {IGNORE} for routes that are none)",
        )
    parsed: list[Route] = []
    for role, entries in routes.items():
        if isinstance(entries, str) or not isinstance(entries, list | tuple):
            raise RouteTableError(
                f"{where}: routes.{role} is not a list", "write it as a list of 'METHOD /path' strings"
            )
        parsed.extend(Route.parse(entry, role, f"{where}: routes.{role}") for entry in entries)
    seen: dict[tuple[str, tuple[str, ...]], Route] = {}
    for route in parsed:
        shape = (route.method, tuple("{}" if _PLACEHOLDER.match(s) else s for s in route.segments))
        if shape in seen and seen[shape].role != route.role:
            raise RouteTableError(
                f"{where}: {route.text} ({route.role}) and {seen[shape].text} "
                f"({seen[shape].role}) match the same requests",
                "keep one",
            )
        seen[shape] = route
    missing = [role for role in ROLES if not any(r.role == role for r in parsed)]
    if missing:
        raise RouteTableError(
            f"{where}: no route for role(s) {', '.join(missing)}",
            "give every role at least one route (the checks arm each)",
        )
    return RouteTable(name, tuple(parsed))


def vendor(name: str) -> RouteTable:
    if name not in VENDOR_ROUTES:
        raise RouteTableError(
            f"the kit has no route table for vendor {name!r}",
            f"name one of {', '.join(sorted(VENDOR_ROUTES))}, or give a YAML file ({FORMAT})",
        )
    return build(name, dict(VENDOR_ROUTES[name]), f"the kit's {name} table")


def load(path: str | Path) -> RouteTable:
    """A table from a YAML file with ``routes:`` (and optionally ``vendor:``)."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RouteTableError(
            f"route table {p}: cannot read it ({file_problem(exc)})", "pass the path of a readable YAML file"
        ) from None
    except yaml.YAMLError as exc:
        raise RouteTableError(
            f"route table {p}: not valid YAML ({yaml_problem(exc)})", "fix the YAML syntax at that line"
        ) from None
    if not isinstance(data, dict) or "routes" not in data:
        raise RouteTableError(
            f"route table {p}: the top level is not a mapping with 'routes:'",
            f"write routes: with {', '.join(ROLES)}, each a list of 'METHOD /path' ({FORMAT})",
        )
    unknown = sorted(set(data) - {"vendor", "routes"})
    if unknown:
        raise RouteTableError(
            f"route table {p}: unknown key(s) {', '.join(map(str, unknown))}", "use only routes and vendor"
        )
    return build(str(data.get("vendor") or p.name), data["routes"], f"route table {p}")


def tcp(spec: str) -> RouteTable:
    """``tcp:HOST:PORT``: every connection to that endpoint carries commands (role ``exec``), faulted by the
    kit's TCP proxy (conformance/fault_proxy.py::TcpFaultProxy); nothing else is a role."""
    rest = spec[len(TCP_PREFIX) :]
    host, _, port = rest.rpartition(":")
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if (
        not host
        or not port.isdigit()
        or not 0 < int(port) < 65536
        or any(c in host for c in "/ []")
        or not (":" not in host or _ipv6(host))
    ):
        raise RouteTableError(
            f"--client-faults={spec}: not tcp:HOST:PORT with a host and a port from 1 to 65535",
            "name the endpoint your backend connects to, e.g. --client-faults=tcp:127.0.0.1:2222 "
            "(an IPv6 host in brackets: tcp:[::1]:2222)",
        )
    target = (host, int(port))
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    route = Route(f"TCP {shown}", "TCP", (), "exec")
    return RouteTable(f"{TCP_PREFIX}{shown}", (route,), tcp_target=target)


def _ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def resolve(spec: str, *, vendor_hint: str | None) -> RouteTable:
    """The table ``spec`` names: a vendor, a YAML file, ``tcp:HOST:PORT``, or ``on`` (the run's vendor,
    ``vendor_hint``)."""
    if spec.startswith(TCP_PREFIX):
        return tcp(spec)
    if spec == "on":
        if vendor_hint in VENDOR_ROUTES:
            return vendor(vendor_hint)
        raise RouteTableError(
            "--client-faults needs to know which requests create a sandbox, run a command or read its state",
            "name a vendor the kit knows (--client-faults="
            f"{'|'.join(sorted(VENDOR_ROUTES))}) or give a route table file "
            f"(--client-faults=routes.yaml; {FORMAT})",
        )
    if spec in VENDOR_ROUTES:
        return vendor(spec)
    if spec.endswith((".yaml", ".yml")) or Path(spec).exists():
        return load(spec)
    raise RouteTableError(
        f"--client-faults={spec}: not a vendor the kit knows, not 'on' or 'off', not tcp:HOST:PORT and not a "
        "route table file",
        f"pass on, off, one of {', '.join(sorted(VENDOR_ROUTES))}, tcp:HOST:PORT or a routes.yaml",
    )

"""The cloudflare_sandbox configuration: HERMES_CF_* variables and terminal.* keys.

    HERMES_CF_ENDPOINT        required  the Worker's origin: https://..., or http://localhost
    HERMES_CF_TOKEN           required  the Worker's SANDBOX_API_TOKEN (>= 32 characters)
    HERMES_CF_NAMESPACE       optional  scopes workspace ids (default: this profile's Hermes home)
    HERMES_CF_WORKSPACE       optional  one named workspace shared by every task id
    HERMES_CF_IMAGE           optional  an image name defined in wrangler.jsonc (default hermes)
    HERMES_CF_INSTANCE        optional  lite or standard-1..4 (default: the Worker's)
    HERMES_CF_ACCESS_CLIENT_ID / _SECRET  a Cloudflare Access service token: both or neither
    terminal.cwd                  /workspace  the workspace directory in the container
    terminal.container_persistent false       keep the workspace in snapshots between sessions

Every variable is read through Hermes's secret scope (reference.common.credentials)
and never from anywhere else: a scope that cannot be read is a SettingsError,
not a reason to look in os.environ.  Messages name the variable and the fix and
never echo a secret.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from reference.common.credentials import Read, required, secret
from reference.common.errors import SettingsError
from reference.common.settings import container_persistent, hermes_home, terminal_settings

ENDPOINT_VAR = "HERMES_CF_ENDPOINT"
TOKEN_VAR = "HERMES_CF_TOKEN"
NAMESPACE_VAR = "HERMES_CF_NAMESPACE"
WORKSPACE_VAR = "HERMES_CF_WORKSPACE"
IMAGE_VAR = "HERMES_CF_IMAGE"
INSTANCE_VAR = "HERMES_CF_INSTANCE"
ACCESS_ID_VAR = "HERMES_CF_ACCESS_CLIENT_ID"
ACCESS_SECRET_VAR = "HERMES_CF_ACCESS_CLIENT_SECRET"
# Never passed into the container; Hermes strips these from its own subprocesses too.
STRIP_KEYS = frozenset(
    {TOKEN_VAR, ACCESS_ID_VAR, ACCESS_SECRET_VAR, "CLOUDFLARE_API_TOKEN", "CLOUDFLARE_API_KEY", "SANDBOX_API_TOKEN"}
)

MIN_TOKEN_CHARS = 32
DEFAULT_IMAGE = "hermes"
DEFAULT_CWD = "/workspace"
CONTAINER_HOME = "/home/hermes"  # the image's user home, for ~ in terminal.cwd
INSTANCES = ("lite", "standard-1", "standard-2", "standard-3", "standard-4")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
_IMAGE = re.compile(r"[A-Za-z0-9_-]{1,128}")
EXAMPLE_ENDPOINT = "https://hermes-sandbox.you.workers.dev"
TOKEN_FIX = (
    "generate one with python -c 'import secrets; print(secrets.token_urlsafe(48))', store it in "
    "the Worker with npx wrangler secret put SANDBOX_API_TOKEN, and set the same value as "
    f"{TOKEN_VAR} in the profile's .env"
)
# Required variables and how to get them.
CREDENTIALS = {
    ENDPOINT_VAR: f"add the Worker's origin to the profile's .env, e.g. {ENDPOINT_VAR}={EXAMPLE_ENDPOINT}",
    TOKEN_VAR: TOKEN_FIX,
}


@dataclass(frozen=True)
class Settings:
    endpoint: str
    token: str = field(repr=False)
    namespace: str
    workspace: str | None = None
    image: str = DEFAULT_IMAGE
    instance: str | None = None
    access: tuple[str, str] | None = field(default=None, repr=False)
    cwd: str = DEFAULT_CWD
    persistent: bool = False

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values that must never appear in a message, a log or the container."""
        return (self.token, *(self.access or ()))

    def workspace_config(self, *, persistent: bool) -> dict[str, Any]:
        """The init body: the workspace's fixed configuration (a different one is a config_conflict)."""
        body: dict[str, Any] = {"persistent": persistent, "cwd": self.cwd, "image": self.image}
        if self.instance:
            body["instance"] = self.instance
        return body


def validate_endpoint(raw: str) -> str:
    """The Worker's origin: https, or http on this machine; no path, query, fragment or credentials."""
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise SettingsError(
            ENDPOINT_VAR, "is not a URL", f"set it to the Worker's origin, e.g. {EXAMPLE_ENDPOINT}"
        ) from None
    if parts.username is not None or parts.password is not None:
        raise SettingsError(ENDPOINT_VAR, "contains credentials", f"remove them (the token goes in {TOKEN_VAR})")
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        raise SettingsError(
            ENDPOINT_VAR,
            "does not start with https:// and a host name",
            f"set it to the Worker's origin, e.g. {EXAMPLE_ENDPOINT}",
        )
    if parts.scheme == "http" and host not in LOCAL_HOSTS:
        raise SettingsError(
            ENDPOINT_VAR,
            f"uses http:// for {host}, so the bearer token would travel in clear text",
            "use https:// (http:// is allowed only for localhost, 127.0.0.1 and ::1)",
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or raw.rstrip().endswith(("?", "#")):
        raise SettingsError(
            ENDPOINT_VAR,
            "must be the Worker's origin only",
            f"remove the path, query or fragment after the host (for example {parts.scheme}://{parts.netloc})",
        )
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    netloc = f"[{host}]" if literal is not None and literal.version == 6 else host
    return f"{parts.scheme}://{netloc}{f':{port}' if port is not None else ''}"


def validate_token(raw: str) -> str:
    if any(c.isspace() for c in raw) or not raw.isascii() or not raw.isprintable():
        raise SettingsError(
            TOKEN_VAR, "contains whitespace or non-ASCII characters", f"copy the token exactly, or {TOKEN_FIX}"
        )
    if len(raw) < MIN_TOKEN_CHARS:
        raise SettingsError(
            TOKEN_VAR,
            f"is too short ({len(raw)} characters; the Worker refuses tokens under {MIN_TOKEN_CHARS})",
            TOKEN_FIX,
        )
    return raw


def container_cwd(raw: str) -> str:
    """terminal.cwd as an absolute container path; ~ is the image user's home."""
    value = raw.strip()
    if value == "~" or value.startswith("~/"):
        value = CONTAINER_HOME + value[1:]
    value = value.rstrip("/") or "/"
    if not value.startswith("/") or "\0" in value or len(value.encode("utf-8", "surrogateescape")) > 4096:
        raise SettingsError(
            "terminal.cwd",
            f"{raw!r} is not an absolute path in the container",
            "set one, e.g. hermes config set terminal.cwd /workspace",
        )
    return value


def resolve(
    container_config: dict[str, Any] | None = None, *, terminal: dict[str, Any] | None = None, read: Read = secret
) -> Settings:
    """Validated settings from the secret scope, container_config and config.yaml's terminal section."""
    values = required(CREDENTIALS, read)
    endpoint, token = validate_endpoint(values[ENDPOINT_VAR]), validate_token(values[TOKEN_VAR])

    access_id, access_secret = read(ACCESS_ID_VAR), read(ACCESS_SECRET_VAR)
    if (access_id is None) != (access_secret is None):
        have, missing = (ACCESS_ID_VAR, ACCESS_SECRET_VAR) if access_id else (ACCESS_SECRET_VAR, ACCESS_ID_VAR)
        raise SettingsError(
            missing,
            f"is not set (only {have} is set: a Cloudflare Access service token needs "
            f"both {ACCESS_ID_VAR} and {ACCESS_SECRET_VAR})",
            f"set {missing} too, or remove {have}",
        )
    for name, value in ((ACCESS_ID_VAR, access_id), (ACCESS_SECRET_VAR, access_secret)):
        if value is not None and (not value.isascii() or not value.isprintable()):
            raise SettingsError(name, "contains characters an HTTP header cannot carry", "copy it exactly")

    image = read(IMAGE_VAR) or DEFAULT_IMAGE
    if not _IMAGE.fullmatch(image):
        raise SettingsError(
            IMAGE_VAR,
            f"{image!r} is not an image name",
            "use the name of an image defined in the Worker's wrangler.jsonc (letters, digits, "
            "'_' and '-'), e.g. hermes",
        )
    instance = read(INSTANCE_VAR)
    if instance is not None and instance not in INSTANCES:
        raise SettingsError(
            INSTANCE_VAR,
            f"{instance!r} is not an instance type",
            f"use one of {', '.join(INSTANCES)} that the Worker's ALLOWED_INSTANCE_TYPES lists",
        )

    term = terminal_settings() if terminal is None else terminal
    persistent = container_persistent(container_config, term, False)
    return Settings(
        endpoint=endpoint,
        token=token,
        namespace=read(NAMESPACE_VAR) or str(hermes_home()),
        workspace=read(WORKSPACE_VAR),
        image=image,
        instance=instance,
        access=(access_id, access_secret) if access_id and access_secret else None,
        cwd=container_cwd(str(term.get("cwd") or DEFAULT_CWD)),
        persistent=persistent,
    )

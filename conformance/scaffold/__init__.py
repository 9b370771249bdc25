"""``hermes-backend-kit init-plugin``: write a new, installable Hermes backend plugin.

The templates under ``templates/`` are package data: ``common/`` goes into every plugin,
then ``local/`` or ``http/`` on top.  A file ``X.tmpl`` becomes ``X`` with its placeholders
filled (``{{name}}``, ``{{Class}}``, ``{{ENV}}``, ``{{Title}}``, ``{{dist}}``,
``{{requires_hermes}}``: the contract's Hermes floor) and a path
segment ``__pkg__`` becomes the plugin's package name.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from conformance import contract
from conformance.errors import ScaffoldError, file_problem

TEMPLATES = ("local", "http")
# Names a host reserves for its own backends, and words the host looks for in an
# environment's class name to recognise a built-in backend (clause provider.env-class-name).
RESERVED = frozenset(
    {
        "local",
        "docker",
        "singularity",
        "modal",
        "managed_modal",
        "daytona",
        "vercel_sandbox",
        "ssh",
        "apple_container",
        "bubblewrap",
    }
)
CLASS_NAME_WORDS = ("local", "ssh", "docker", "singularity", "modal", "daytona")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Names:
    name: str  # package, entry point and backend name: acme_cloud
    cls: str  # class prefix: AcmeCloud
    env: str  # environment variable prefix: ACME_CLOUD
    title: str  # for people: Acme Cloud
    dist: str  # distribution: hermes-acme-cloud

    @classmethod
    def of(cls, name: str) -> Names:
        parts = name.split("_")
        return cls(
            name=name,
            cls="".join(p.capitalize() for p in parts),
            env=name.upper(),
            title=" ".join(p.capitalize() for p in parts if p),
            dist="hermes-" + name.replace("_", "-"),
        )

    def fill(self, text: str) -> str:
        for key, value in (
            ("name", self.name),
            ("Class", self.cls),
            ("ENV", self.env),
            ("Title", self.title),
            ("dist", self.dist),
            ("requires_hermes", contract.load().requires_hermes or ""),
        ):
            text = text.replace("{{" + key + "}}", value)
        return text


def check_name(name: str) -> Names:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ScaffoldError(
            f"{name!r} is not a valid Python package name",
            "use lowercase letters, digits and underscores, starting with a letter (e.g. acme_cloud)",
        )
    if not _NAME.match(name):
        raise ScaffoldError(
            f"{name!r} is not lowercase", f"use {name.lower()!r}: Hermes registers backend names in lowercase"
        )
    if name in RESERVED:
        raise ScaffoldError(
            f"{name!r} is a built-in Hermes backend name", "pick a name of your own (e.g. your company's)"
        )
    names = Names.of(name)
    clash = next((w for w in CLASS_NAME_WORDS if w in names.cls.lower()), None)
    if clash:
        raise ScaffoldError(
            f"{name!r} contains {clash!r}, which Hermes reads in an environment's class name as a built-in backend",
            "pick a name without it",
        )
    return names


def _template_files(template: str) -> list[tuple[str, str]]:
    """(relative path, text) of every file of ``common`` and then ``template``."""
    root = resources.files("conformance.scaffold") / "templates"
    files: dict[str, str] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, rel + "/")
            elif child.name.endswith(".tmpl"):
                files[rel[: -len(".tmpl")]] = child.read_text("utf-8")

    for part in ("common", template):
        walk(root / part, "")
    return sorted(files.items())


def generate(name: str, directory: str | Path | None = None, template: str = "local") -> list[Path]:
    """Write the plugin ``name`` into ``directory`` (default ./NAME); return the files written."""
    if template not in TEMPLATES:
        raise ScaffoldError(f"unknown template {template!r}", f"use one of {', '.join(TEMPLATES)}")
    names = check_name(name)
    target = Path(directory) if directory is not None else Path(name)
    if target.exists() and not target.is_dir():
        raise ScaffoldError(f"{target} exists and is not a directory", "pass --dir with a new or empty directory")
    if target.is_dir() and any(target.iterdir()):
        raise ScaffoldError(f"{target} is not empty", "pass --dir with a new or empty directory")
    written = []
    for rel, text in _template_files(template):
        path = target / rel.replace("__pkg__", names.name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(names.fill(text), "utf-8")
            if path.suffix == ".sh":
                path.chmod(0o755)
        except OSError as exc:
            raise ScaffoldError(
                f"cannot write {exc.filename or path} ({file_problem(exc)})", "pass --dir with a writable directory"
            ) from None
        written.append(path)
    return written

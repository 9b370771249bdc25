"""The kit's errors for bad user input: each says what is wrong, why (when that helps) and the fix.

Every error the kit raises because of what a user handed it (an option, a
file, a backend, a contract) is a ``KitError``.  The command line prints one
as ``error: <what> — <fix>`` (and ``  why: ...`` when there is a why) and exits
2; pytest prints it as one line too.  Anything else that escapes is a bug in
the kit.  Lower-layer exceptions (OSError, YAML and JSON decode errors,
UnicodeDecodeError, a backend's ImportError, jsonschema errors) are turned
into the most specific of these where the input is read, with a fix that says
what to do.

    KitError                       what / why / fix
    ├── UsageError                 options that do not go together, an unknown clause id
    ├── InputFileError             a file named on the command line is missing, a directory or not text
    │   └── ReportFileError        ... or is not a certification report
    ├── ContractError              a contract file is not YAML or not valid against its schema
    │   └── ContractFileError      ... or cannot be read at all
    ├── BackendLoadError           --backend cannot be found, imported or registered (loader.LoadError)
    │   └── PluginManifestError    its plugin.yaml cannot be read or is not a mapping
    ├── DeclarationError           what a backend declares about itself cannot be used
    │   ├── CapabilityError        a capability both declared and disclaimed
    │   └── PersistentPathError    a persistent path that is not an absolute path or ~
    ├── ConfigError                a file of settings the run reads is wrong
    │   ├── BackendConfigError     --backend-config (and options that contradict it)
    │   │   └── RouteTableError    a --client-faults route table
    │   ├── WaiverError            --waivers, or a waiver that expired
    │   └── CredentialError        a credential a run against the real service needs is not set
    ├── HostError                  --host cannot be set up in this process
    ├── FakeServiceError           a fake service cannot be started, reached or attached
    ├── SignatureError             a key or signature is unusable, or a signature does not verify
    └── ScaffoldError              init-plugin cannot write the plugin it was asked for

Each class also derives from the builtin exception it replaced (ValueError or
RuntimeError), so code that catches those keeps working.  Every class carries
a ``fix`` of its own, used when a raise site has nothing more specific to say.
Messages never hold a secret: printers pass them through conformance.redact.
"""

from __future__ import annotations

from typing import Any


class KitError(Exception):
    """Bad input to the kit: ``what`` is wrong, ``why`` (may be empty) and the ``fix``."""

    fix: str = "check the command line against `hermes-backend-kit --help`"

    def __init__(self, what: str, fix: str | None = None, why: str = "") -> None:
        self.what = what
        self.why = why
        self.fix = fix or type(self).fix
        super().__init__(self.one_line())

    def line(self) -> str:
        """``what — fix``: the line the command line prints after ``error: ``."""
        return f"{self.what} — {self.fix}"

    def one_line(self) -> str:
        """Everything on one line (what pytest prints): ``what: why — fix``."""
        why = " ".join(self.why.split())
        return f"{self.what}: {why} — {self.fix}" if why else self.line()

    def __str__(self) -> str:
        return self.one_line()

    def to_dict(self) -> dict[str, str]:
        return {"kind": type(self).__name__, "what": self.what, "why": self.why, "fix": self.fix}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KitError:
        """The error ``to_dict`` described (in another process), as its own class where the kit has it."""
        kind = _subclasses().get(str(data.get("kind")), cls)
        error = kind.__new__(kind)
        KitError.__init__(
            error,
            str(data.get("what") or "the run could not start"),
            str(data.get("fix") or "") or None,
            str(data.get("why") or ""),
        )
        return error


def _subclasses() -> dict[str, type[KitError]]:
    found: dict[str, type[KitError]] = {}
    todo: list[type[KitError]] = [KitError]
    while todo:
        current = todo.pop()
        found.setdefault(current.__name__, current)
        todo.extend(current.__subclasses__())
    return found


def all_classes() -> list[type[KitError]]:
    """KitError and every subclass defined so far."""
    return list(_subclasses().values())


class UsageError(KitError, ValueError):
    fix = "see `hermes-backend-kit COMMAND --help`"


class InputFileError(KitError, ValueError):
    fix = "pass the path of an existing, readable file"


class ReportFileError(InputFileError):
    fix = "pass a report.json written by `hermes-backend-kit certify` (or pytest --report)"


class ContractError(KitError, ValueError):
    fix = "fix the named fields; the shape is in conformance/contract.schema.json"


class ContractFileError(ContractError):
    fix = "pass the path of a readable contract YAML file (the kit's own is conformance/contract.yaml)"


class BackendLoadError(KitError, RuntimeError):
    fix = (
        "give a plugin directory (plugin.yaml and __init__.py), package.module[:attr], ep:NAME or a name "
        "from `hermes-backend-kit backends`"
    )


class PluginManifestError(BackendLoadError):
    fix = "fix the file: a plugin.yaml is a mapping of name, version, description and kind"


class DeclarationError(KitError, ValueError):
    fix = "fix what the backend declares (provider attributes, plugin.yaml conformance:, or --backend-config)"


class CapabilityError(DeclarationError):
    fix = "keep each capability in one list: declared (capabilities) or disclaimed (disclaims), not both"


class PersistentPathError(DeclarationError):
    fix = "name the directory the sandbox keeps across cleanup as an absolute path (e.g. /workspace) or ~/sub"


class ConfigError(KitError, ValueError):
    fix = "fix the named key in the file"


class BackendConfigError(ConfigError):
    fix = "fix the named key of --backend-config (keys: terminal, env, capabilities, disclaims, persistent_path)"


class RouteTableError(BackendConfigError):
    fix = "fix the route table (docs/transport-faults.md), or pass on, off or a vendor the kit knows"


class WaiverError(ConfigError):
    fix = "fix the waiver: each has clause, reason, issue (a URL), expires (YYYY-MM-DD) and strict"


class CredentialError(ConfigError):
    fix = "set the named variable in the environment or in --backend-config's env: section"


class HostError(KitError, RuntimeError):
    fix = "use --host builtin (the kit's stand-ins), or run in a fresh process"


class FakeServiceError(KitError, RuntimeError):
    fix = "check --fake / --fake-control (`hermes-backend-kit fake serve --help`), or rerun with --debug"


class SignatureError(KitError):
    fix = "make a key pair with `hermes-backend-kit keygen` and sign with `hermes-backend-kit sign`"


class ScaffoldError(KitError, ValueError):
    fix = "see `hermes-backend-kit init-plugin --help`"


def file_problem(exc: OSError | UnicodeDecodeError) -> str:
    """Why a file could not be read, in a few words (no path: the caller names the file)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "it is a directory"
    return exc.strerror or type(exc).__name__


def yaml_problem(exc: Exception) -> str:
    """A YAML parser's error in one line: where (line, column) and what."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else str(problem)

"""provider: the host workspace binding a container provider may receive (workspace-binding capability).

Hosts with workspace bindings pass ``workspace_binding=WorkspaceBinding(host_path,
source)`` (or None) to create_environment.  The binding is the host's class
when the active host has one, else the kit's stand-in of it.  Invalid
bindings are made two ways: values that are no binding at all, and instances
of the binding class whose fields were forced past its own validation (a host
bug or a forged value must still be refused by the provider).
"""

from __future__ import annotations

import importlib
import shlex
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.checks._support import nonce, out, rc, run
from conformance.host.standins import terminal_env_provider as standin


def binding_class() -> type[Any]:
    """The active host's WorkspaceBinding, or the kit's stand-in when the host has none."""
    host = getattr(importlib.import_module("agent.terminal_env_provider"), "WorkspaceBinding", None)
    return host if isinstance(host, type) else standin.WorkspaceBinding


def binding(host_path: str, source: str = "task") -> Any:
    return binding_class()(host_path=host_path, source=source)


def _forced(host_path: str, source: str) -> Any:
    """An instance of the binding class whose fields skipped its validation."""
    cls: Any = binding_class()  # the host's class or the stand-in: its own __new__, whatever it is
    value = cls.__new__(cls)
    object.__setattr__(value, "host_path", host_path)
    object.__setattr__(value, "source", source)
    return value


def _invalid(workdir: str) -> dict[str, Any]:
    return {
        "an object that is no binding": object(),
        "a mapping instead of a binding": {"host_path": workdir, "source": "task"},
        "a look-alike of another type": SimpleNamespace(host_path=workdir, source="task"),
        "a binding with a relative host_path": _forced("relative/workspace", "task"),
        "a binding with an unnormalised host_path": _forced(f"{workdir}/../elsewhere", "task"),
        "a binding with an unknown source": _forced(workdir, "model-said-so"),
    }


@pytest.mark.clause("provider.workspace-binding-checked")
def test_none_and_a_valid_binding_work(kit, make_env, tmp_path):
    for label, value in (("None", None), ("a valid binding", binding(str(tmp_path), "factory"))):
        env = make_env(extra_kwargs={"workspace_binding": value})
        result = run(env, "echo bound")
        assert rc(result) == 0 and out(result).strip() == "bound", (
            f"create_environment(workspace_binding={label}) gave an environment that cannot run a command: "
            f"{out(result)[-300:]!r}"
        )


@pytest.mark.clause("provider.workspace-binding-checked")
def test_an_invalid_binding_is_refused(kit, tmp_path):
    accepted, unclear = [], []
    for label, value in _invalid(str(tmp_path)).items():
        try:
            env = kit.create(extra_kwargs={"workspace_binding": value})
        except (TypeError, ValueError) as exc:
            if "workspace_binding" not in str(exc):
                unclear.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        except AssertionError:
            raise
        except Exception as exc:
            unclear.append(f"{label}: raised {type(exc).__name__} (not TypeError/ValueError): {str(exc)[:200]}")
            continue
        kit.release(env)
        accepted.append(label)
    assert not accepted, f"create_environment accepted an invalid workspace_binding: {accepted}"
    assert not unclear, (
        "an invalid workspace_binding was refused without a TypeError/ValueError naming workspace_binding: "
        + "; ".join(unclear)
    )


@pytest.mark.clause("provider.workspace-binding-not-authorisation")
def test_a_binding_mounts_nothing_by_itself(kit, make_env, tmp_path):
    workspace = tmp_path / nonce("workspace")
    workspace.mkdir()
    secret_name, secret_value = "kit-bound.txt", nonce("bound")
    (workspace / secret_name).write_text(secret_value)
    env = make_env(extra_kwargs={"workspace_binding": binding(str(workspace), "session")})
    at_host_path = shlex.quote(f"{workspace}/{secret_name}")
    result = run(env, f"cat {at_host_path} 2>/dev/null; cat ./{secret_name} 2>/dev/null; true", timeout=15)
    assert secret_value not in out(result), (
        f"a file of the bound host workspace {workspace} is readable in the sandbox although the run "
        "configures no mounts: the binding was treated as permission to mount it"
    )

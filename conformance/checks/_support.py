"""Small helpers shared by the checks."""

from __future__ import annotations

import hashlib
import secrets
import shlex
import time
from typing import Any, NoReturn

import pytest

from conformance import persistent_path
from conformance.host.calls import bounded
from conformance.host.drivers import interrupted, returncode, run
from conformance.persistent_path import PersistentPath
from conformance.verdicts import NA_PREFIX, UNVERIFIED_PREFIX

__all__ = [
    "attempt",
    "keep",
    "kept",
    "locate",
    "nonce",
    "not_applicable",
    "out",
    "plant",
    "rc",
    "run",
    "sha256_hex",
    "stop_by",
    "unverified",
]


def out(result: dict[str, Any]) -> str:
    return result.get("output", "") if isinstance(result, dict) else ""


def rc(result: dict[str, Any]) -> int:
    return returncode(result)


def attempt(env: Any, command: str, *, timeout: int = 30) -> tuple[int | None, str, dict[str, Any]]:
    """(returncode, or None when execute() raised; its output or the exception; the result) of one call.

    For checks where raising is one of the outcomes they judge; a hang still fails the check.
    """
    try:
        result = run(env, command, timeout=timeout)
    except AssertionError:
        raise
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}", {}
    return rc(result), out(result), result


def returns(fn: Any, *args: Any, deadline: float, what: str) -> Any:
    """``fn(*args)`` within ``deadline`` seconds; a raise fails the check naming ``what`` and the exception."""
    try:
        return bounded(fn, *args, deadline=deadline, what=what)
    except AssertionError:
        raise
    except Exception as exc:
        raise AssertionError(f"{what} raised {type(exc).__name__}: {str(exc)[:300]}") from None


def nonce(label: str = "n") -> str:
    return f"kit-{label}-{secrets.token_hex(8)}"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def not_applicable(reason: str) -> NoReturn:
    """The clause does not apply to this backend for a reason only the check can see."""
    pytest.skip(f"{NA_PREFIX} ({reason})")


def unverified(reason: str) -> NoReturn:
    """The harness could not make the clause's situation happen (a fault that never fired): no verdict."""
    pytest.skip(f"{UNVERIFIED_PREFIX} (harness: {reason})")


def credential_values(kit: Any) -> list[str]:
    """The run's credential values (conformance.credentials); unverified when there are none to look for."""
    values: list[str] = kit.secret_values()
    if not values:
        unverified(
            "no credential value to look for: the provider names no strip_env_keys and plugin.yaml no "
            "requires_env that is set, and no fake issued one"
        )
    return values


def own_process_space(kit: Any) -> bool:
    """Do the backend's commands run where every process belongs to its sandbox: a machine or a PID
    namespace of their own (a remote service, or a fake whose boxes are isolated)?  Otherwise (a
    host-attached backend, boxes that are plain processes on this machine) a command shares the machine
    with everything else running on it, and only its own process tree is the sandbox's."""
    world = kit.fake_world_info()
    if world is not None:
        return bool(world.get("isolated")) and not world.get("local")
    return bool(getattr(kit.provider, "is_remote", False)) and kit.has("per-task-sandbox")


def plant(env: Any, label: str = "id") -> tuple[str, str]:
    """Write a nonce file under the sandbox's $HOME; return (relpath, nonce)."""
    value = nonce(label)
    relpath = f".kit-{value}"
    result = run(env, f"printf '%s' {shlex.quote(value)} > \"$HOME\"/{shlex.quote(relpath)}")
    assert rc(result) == 0, f"could not write a file under $HOME: {out(result)!r}"
    return relpath, value


def keep(kit: Any, env: Any, name: str, value: str) -> PersistentPath:
    """Write ``value`` to ``name`` in the directory the backend keeps across cleanup (conformance.persistent_path)."""
    where = persistent_path.of(kit, env)
    result = run(env, f"mkdir -p {where.shell()} && printf '%s' {shlex.quote(value)} > {where.file(name)}")
    assert rc(result) == 0, (
        f"could not write a file in the persistent directory {where.describe()}: returncode {rc(result)}, "
        f"{out(result)[-200:]!r}"
    )
    return where


def kept(kit: Any, env: Any, name: str) -> tuple[int, str, PersistentPath]:
    """(returncode, content, directory) of ``name`` in ``env``'s persistent directory; "kit-absent" when missing.

    Each environment's own directory: a default one is the environment's cwd, which may name its sandbox.
    """
    where = persistent_path.of(kit, env)
    result = run(env, f"cat {where.file(name)} 2>/dev/null || echo kit-absent")
    return rc(result), out(result).strip(), where


def locate(kit: Any, env: Any, label: str = "id") -> str:
    """The world's id of the sandbox ``env`` runs in (found by a planted nonce)."""
    relpath, value = plant(env, label)
    sandbox = kit.world.locate(relpath, value)
    assert sandbox is not None, "the harness cannot find the sandbox the environment runs in"
    return sandbox


def stop_by(env: Any, how: str, command: str) -> dict[str, Any]:
    """Run a long ``command`` and stop it by a 1 s timeout or by an interrupt after 0.3 s."""
    started = time.monotonic()
    if how == "timeout":
        result = run(env, command, timeout=1)
    else:
        result, _ = interrupted(env, command, after_s=0.3, timeout=20)
    elapsed = time.monotonic() - started
    assert elapsed < 4, f"the {how} did not stop the command: execute() returned after {elapsed:.1f}s"
    return result

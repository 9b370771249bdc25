"""errors: failures are results with messages, and never carry a credential."""

from __future__ import annotations

import logging

import pytest

from conformance.checks._support import credential_values, locate, out, rc, run


@pytest.mark.clause("errors.no-raise")
@pytest.mark.parametrize("command", ["exit 1", "false", "if then fi", "cat /kit/does/not/exist"])
def test_failing_commands_return_results(env, command):
    result = run(env, command)  # an exception here fails the check
    assert rc(result) != 0, f"{command!r} returned {rc(result)}"


@pytest.mark.clause("errors.command-not-found")
def test_unknown_command_reports_127(env):
    result = run(env, "kit_no_such_command_xyz --flag")
    assert rc(result) == 127, f"returncode {rc(result)}, expected 127"
    assert "not found" in out(result).lower(), f"output does not say the command was not found: {out(result)!r}"


def _texts_after_failures(kit, caplog) -> list[str]:
    """Every piece of text a user may see from the provider and a broken environment."""
    p = kit.provider
    texts = [repr(p.probe()), repr(p.doctor_checks())]
    with caplog.at_level(logging.DEBUG):
        p.check_requirements({"kit_unknown_key": True})
        env = kit.create(track=False)
        texts.append(out(run(env, "kit_no_such_command_xyz; exit 3")))
        if kit.has("world-states"):
            kit.world.fail(locate(kit, env))
            try:
                texts.append(out(run(env, "true")))
            except AssertionError:
                raise
            except Exception as exc:
                texts.append(f"{exc!r} {exc}")
        kit.cleanup(env)
        try:
            texts.append(out(run(env, "true")))  # after cleanup: an error or a result
        except AssertionError:
            raise
        except Exception as exc:
            texts.append(f"{exc!r} {exc}")
    texts += [r.getMessage() + (r.exc_text or "") for r in caplog.records]
    return texts


@pytest.mark.clause("errors.redacted")
def test_no_credential_in_user_visible_text(kit, caplog):
    secrets = credential_values(kit)
    for text in _texts_after_failures(kit, caplog):
        for value in secrets:
            assert value not in text, f"a credential value appears in user-visible text: {text[:200]!r}"


@pytest.mark.clause("errors.state-message")
def test_broken_sandbox_failure_has_a_message(kit):
    env = kit.create()
    kit.world.fail(locate(kit, env))
    try:
        result = run(env, "true")
    except AssertionError:
        raise
    except Exception as exc:
        assert str(exc).strip(), f"the exception {type(exc).__name__} carries no message"
        return
    assert rc(result) != 0, "a command ran in a broken sandbox"
    assert out(result).strip(), f"returncode {rc(result)} with empty output hides the failure"

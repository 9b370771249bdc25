"""provider.strip-env-keys: looking up proxy settings is not reading a key; reading a key's value is."""

from __future__ import annotations

import pytest

from tests.conftest import run_suite

PLUGIN = """
import os

import httpx

from fakes.tempdir_box.box_provider import TempdirBoxProvider


class Provider(TempdirBoxProvider):
    name = "env_reader_box"

    def create_environment(self, **kwargs):
        with httpx.Client():  # walks the environment for *_proxy variables (urllib's getproxies)
            pass
        {extra}
        return super().create_environment(**kwargs)


def register(ctx):
    ctx.register_terminal_environment_provider(Provider())
"""
CREDENTIALS = {"GITHUB_TOKEN": "ghp_kitcanary_strip_0123456789", "OPENAI_API_KEY": "sk-kitcanary-strip-0123456789"}


@pytest.mark.parametrize(
    "extra, verdict",
    [
        ("pass", "pass"),
        ("os.environ.get('OPENAI_API_KEY')", "fail"),
        ("{k: v for k, v in os.environ.items() if k.endswith('_TOKEN')}", "fail"),
    ],
    ids=["proxy-lookup-only", "reads-a-key", "harvests-keys"],
)
def test_only_reading_a_key_counts(tmp_path, extra, verdict):
    plugin = tmp_path / "env_reader"
    plugin.mkdir()
    (plugin / "plugin.yaml").write_text('name: env-reader\nversion: "1.0"\ndescription: reads env\nkind: backend\n')
    (plugin / "__init__.py").write_text(PLUGIN.format(extra=extra))
    run = run_suite(
        "--backend",
        str(plugin),
        "--fake",
        "tempdir",
        "-k",
        "test_every_credential_read_is_stripped",
        cwd=tmp_path,
        workers=0,
        extra_env=CREDENTIALS,
    )
    assert run.verdicts()["provider.strip-env-keys"] == verdict, run.output[-3000:]
    if verdict == "fail":
        reason = next(c for c in run.report["clauses"] if c["id"] == "provider.strip-env-keys")["reason"]
        assert "not in strip_env_keys" in reason and not any(v in run.output for v in CREDENTIALS.values())

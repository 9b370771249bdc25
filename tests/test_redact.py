"""The kit's one redactor: what it registers, how it masks, and that reports keep their shape."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from conformance import redact
from conformance.redact import MASK, Redactor, credential_name


@pytest.mark.parametrize(
    "name",
    [
        "UPSTASH_BOX_API_KEY",
        "GITHUB_TOKEN",
        "HERMES_CF_TOKEN",
        "DB_PASSWORD",
        "MYSQLPASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "OPENAI_API_KEY",
        "GH_PAT",
        "client_secret",
        "NPM_TOKEN",
    ],
)
def test_credential_names(name):
    assert credential_name(name)


@pytest.mark.parametrize(
    "name", ["PATH", "HOME", "SSLKEYLOGFILE", "KEYBOARD_LAYOUT", "MONKEY", "LANG", "HTTPS_PROXY", "PYTHONPATH"]
)
def test_ordinary_names(name):
    assert not credential_name(name)


def test_values_are_masked_with_their_escaped_spellings():
    r = Redactor()
    assert r.register("s3cr3t/value+x")
    text = "k=s3cr3t/value+x q=s3cr3t%2Fvalue%2Bx"
    assert r.redact(text) == f"k={MASK} q={MASK}"
    quoted = Redactor()
    quoted.register('pa"ss\\word1')
    assert quoted.redact(json.dumps({"v": 'pa"ss\\word1'})) == json.dumps({"v": MASK})


def test_a_longer_value_is_masked_whole():
    r = Redactor()
    r.register("abcdef12")
    r.register("abcdef12-and-more")
    assert r.redact("x abcdef12-and-more y abcdef12") == f"x {MASK} y {MASK}"


def test_short_values_and_guessed_short_values_are_not_registered():
    r = Redactor()
    assert not r.register("abc")
    names = r.register_environ(
        {
            "GITHUB_TOKEN": "ghp_canary_1234",
            "SOME_KEY": "1",
            "FEATURE_TOKEN": "true",
            "PATH": "/usr/bin:/bin",
            "HOME": "/home/someone-long",
        }
    )
    assert names == ["GITHUB_TOKEN"]
    assert r.redact("true /usr/bin:/bin ghp_canary_1234") == f"true /usr/bin:/bin {MASK}"


def test_backend_config_env_masks_secrets_and_keeps_hosts_ports_endpoints_and_paths_readable():
    r = Redactor()
    r.register_config_env(
        {
            "VENDOR_BASE_URL": "https://api.example.invalid/v1",
            "VENDOR_ROOT": "/srv/boxes",
            "VENDOR_ACCOUNT": "acct-7f3a9c21",
            "SSH_HOST": "127.0.0.1",
            "SSH_PORT": "2299",
            "VENDOR_API_KEY": "https://looks-like-a-url",
            "VENDOR_PROXY": "https://user:pw-1234@proxy.invalid",
        }
    )
    text = (
        "https://api.example.invalid/v1 /srv/boxes acct-7f3a9c21 connect to host 127.0.0.1 port 2299 "
        "https://looks-like-a-url https://user:pw-1234@proxy.invalid"
    )
    assert r.redact(text) == (
        "https://api.example.invalid/v1 /srv/boxes acct-7f3a9c21 connect to host 127.0.0.1 port 2299 "
        f"{MASK} https://user:{MASK}@proxy.invalid"
    )


def test_every_handler_a_plugin_adds_writes_masked_text_even_after_the_run(tmp_path):
    script = (
        "import logging, sys\n"
        "from conformance import redact\n"
        "redact.register('kit-canary-late-0123456789')\n"
        "redact.redact_logging()\n"
        "own = logging.getLogger('plugin'); own.addHandler(logging.StreamHandler(sys.stdout))\n"
        "own.warning('own handler kit-canary-late-0123456789')\n"
        "logging.getLogger('other').warning('last resort kit-canary-late-0123456789')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"own handler {MASK}\n" and done.stderr == f"last resort {MASK}\n"


def test_redact_data_walks_json_like_data():
    r = Redactor()
    r.register("tok-123456")
    data = {"a": ["x tok-123456", ("tok-123456", 3)], "tok-123456": {"n": None}}
    assert r.redact_data(data) == {"a": [f"x {MASK}", (MASK, 3)], MASK: {"n": None}}


def test_a_redacting_handler_masks_its_text_but_not_the_record(tmp_path):
    value = "kit-canary-handler-0123456789"
    redact.register(value)
    path = tmp_path / "log.txt"
    handler = redact.redact_handler(logging.FileHandler(path))
    seen: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("kit.test.redact")
    logger.propagate = False
    logger.addHandler(handler)
    logger.addHandler(Capture())
    try:
        logger.warning("key is %s", value)
    finally:
        handler.close()
        logger.handlers.clear()
    assert path.read_text().strip() == f"key is {MASK}"
    # Other handlers (a check looking for leaked keys) still see what was logged.
    assert seen == [f"key is {value}"]


def test_a_failing_report_is_redacted_and_keeps_its_crash_message(pytester):
    value = "kit-canary-report-9876543210"
    redact.register(value)
    pytester.makepyfile(f"""
        def test_leaks():
            print("stdout has {value}")
            assert False, "the backend said {value} is wrong"
    """)
    result = pytester.inline_run("-p", "no:cacheprovider")
    reports = [r for r in result.getreports("pytest_runtest_logreport") if r.when == "call"]
    assert len(reports) == 1 and reports[0].failed
    report = reports[0]
    assert value not in report.longreprtext
    assert value not in "".join(content for _, content in report.sections)
    assert report.longrepr.reprcrash.message.startswith(f"AssertionError: the backend said {MASK} is wrong")


@pytest.mark.parametrize(
    "shown, masked",
    [
        ("DEEPINFRA_API_KEY=di_canary_1234567", "DEEPINFRA_API_KEY=***"),
        ('declare -x MY_PASSWORD="hunter22x"', 'declare -x MY_PASSWORD="***"'),
        ("x GITHUB_TOKEN='ghp_abcdefghij' y", "x GITHUB_TOKEN='***' y"),
        ("PATH=/usr/bin:/bin KEYBOARD=us SSLKEYLOGFILE=/tmp/k", "PATH=/usr/bin:/bin KEYBOARD=us SSLKEYLOGFILE=/tmp/k"),
        ("FLAG_TOKEN=1 NO_TOKEN=", "FLAG_TOKEN=1 NO_TOKEN="),
    ],
)
def test_any_credential_named_assignment_is_masked_whoever_it_belongs_to(shown, masked):
    """A process listing shows other programs' variables the kit never registered: their values are masked
    by their names, and the names stay readable as evidence."""
    assert redact.Redactor().redact(shown) == masked

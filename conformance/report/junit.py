"""The certificate as properties of pytest's junit.xml test suite, for CI views that read junit only."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.report.headline import headline

PREFIX = "hermes_backend_kit."


def properties(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (PREFIX + "certified", "true" if report["certified"] else "false"),
        (PREFIX + "profile", report.get("profile") or "none"),
        (PREFIX + "certificate", headline(report)),
        (PREFIX + "contract_version", str(report["contract"]["version"])),
        (PREFIX + "kit_version", str(report["kit"]["version"])),
    ]


def add_certificate(config: pytest.Config, report: dict[str, Any]) -> None:
    """Add the properties to --junitxml's file (a no-op without --junitxml)."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pytest moved it: the report files still carry the certificate
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    for name, value in properties(report):
        xml.add_global_property(name, value)


CHECKS_PATH = "conformance/checks/"


def name_by_module(config: pytest.Config, report: pytest.TestReport) -> None:
    """Give a check's junit testcase the class name of its module (conformance.checks.test_exec),
    whatever path the kit is installed at: the node id holds the path from the rootdir, so a venv
    under the working directory put ".venv.lib.python3.11.site-packages." in front of every class."""
    try:
        from _pytest.junitxml import mangle_test_address, xml_key
    except ImportError:
        return
    xml = config.stash.get(xml_key, None)
    path, sep, rest = report.nodeid.partition("::")
    at = path.replace("\\", "/").find(CHECKS_PATH)
    if xml is None or at <= 0:
        return
    classnames = mangle_test_address(path[at:] + sep + rest)[:-1]
    if xml.prefix:
        classnames.insert(0, xml.prefix)
    xml.node_reporter(report).add_attribute("classname", ".".join(classnames))

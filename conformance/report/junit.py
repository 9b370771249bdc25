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

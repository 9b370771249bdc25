"""Waivers: known failures accepted for a while, in a reviewed YAML file.

    - clause: persist.paused-resumed
      reason: the vendor's resume API is being fixed
      issue: https://github.com/acme/acme-hermes/issues/12
      expires: 2027-01-31
      strict: true          # fail the run if the clause starts passing

A waived MUST failure or skip does not block certification but stays visible
in every output.  An expired waiver is an error; so is a strict waiver whose
clause passes (remove the waiver).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from conformance.contract import Contract
from conformance.errors import WaiverError, file_problem, yaml_problem

_URL = re.compile(r"^https?://\S+$")
FIELDS = ("clause", "reason", "issue", "expires", "strict")


@dataclass(frozen=True)
class Waiver:
    clause: str
    reason: str
    issue: str
    expires: dt.date
    strict: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "clause": self.clause,
            "reason": self.reason,
            "issue": self.issue,
            "expires": self.expires.isoformat(),
            "strict": self.strict,
        }


def load(path: str | Path, contract: Contract, *, today: dt.date | None = None) -> list[Waiver]:
    today = today or dt.date.today()
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise WaiverError(
            f"--waivers {p}: cannot read it ({file_problem(exc)})",
            "pass the path of a readable YAML file, or leave --waivers out when you have none",
        ) from None
    except yaml.YAMLError as exc:
        raise WaiverError(
            f"--waivers {p}: not valid YAML ({yaml_problem(exc)})", "fix the YAML syntax at that line"
        ) from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise WaiverError(
            f"--waivers {p}: the top level is a {type(data).__name__}, not a list of waivers",
            f"write a YAML list of waivers, each with {', '.join(FIELDS)}",
        )
    waivers = []
    for i, entry in enumerate(data):
        where = f"--waivers {p}: waiver [{i}]"
        if not isinstance(entry, dict):
            raise WaiverError(f"{where} is not a mapping", f"write it as a mapping of {', '.join(FIELDS)}")
        missing = [f for f in FIELDS if f not in entry]
        unknown = sorted(set(entry) - set(FIELDS))
        if missing or unknown:
            raise WaiverError(
                f"{where}: missing {missing or 'nothing'}, unknown {unknown or 'nothing'}",
                f"give a waiver exactly {', '.join(FIELDS)}",
            )
        clause = str(entry["clause"])
        if clause not in contract:
            raise WaiverError(
                f"{where}: unknown clause {clause!r}", "name a clause id from `hermes-backend-kit contract list`"
            )
        if not str(entry["reason"]).strip():
            raise WaiverError(f"{where}: the reason is empty", "say why the failure is accepted for now")
        if not _URL.match(str(entry["issue"])):
            raise WaiverError(
                f"{where}: issue must be the URL of the issue that tracks the fix", "give the issue's http(s) URL"
            )
        expires = entry["expires"]
        if isinstance(expires, str):
            try:
                expires = dt.date.fromisoformat(expires)
            except ValueError:
                raise WaiverError(f"{where}: expires {expires!r} is not a date", "write it as YYYY-MM-DD") from None
        if not isinstance(expires, dt.date):
            raise WaiverError(f"{where}: expires is not a date", "write it as YYYY-MM-DD")
        if expires < today:
            raise WaiverError(
                f"{where} for {clause} expired on {expires.isoformat()}",
                "fix the clause, or renew the waiver with a new date and a reason",
            )
        if not isinstance(entry["strict"], bool):
            raise WaiverError(f"{where}: strict must be true or false", "write strict: true or strict: false")
        waivers.append(Waiver(clause, str(entry["reason"]).strip(), str(entry["issue"]), expires, entry["strict"]))
    seen = [w.clause for w in waivers]
    doubled = sorted({c for c in seen if seen.count(c) > 1})
    if doubled:
        raise WaiverError(f"--waivers {p}: more than one waiver for {', '.join(doubled)}", "keep one waiver per clause")
    return waivers


def apply(clauses: list[dict[str, Any]], waivers: list[Waiver]) -> list[str]:
    """Mark waived clauses in the report's clause list; return the errors (strict unexpected passes)."""
    by_id = {c["id"]: c for c in clauses}
    errors = []
    for waiver in waivers:
        clause = by_id.get(waiver.clause)
        if clause is None:
            continue
        if clause["verdict"] in ("fail", "skipped"):
            clause["waived"] = waiver.to_dict()
        elif clause["verdict"] == "pass" and waiver.strict:
            errors.append(
                f"strict waiver for {waiver.clause} but the clause passes: remove the waiver ({waiver.issue})"
            )
    return errors

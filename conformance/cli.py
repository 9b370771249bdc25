"""The ``hermes-backend-kit`` command.

Every command exits with one of the codes in ``EXIT_CODES``.  Bad input (an
option, a file, a backend, a contract: a conformance.errors.KitError) is one
line on stderr, ``error: <what> — <fix>``, without a traceback unless
``--debug`` (or HERMES_KIT_DEBUG=1) asks for one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import textwrap
import threading
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from conformance import __version__, backends, bytecode, contract, suite_command
from conformance.errors import KitError, ReportFileError, UsageError

EXIT_CODES = (
    (0, "success: certified, verified, no difference, nothing wrong; a `certify --select` run whose clauses pass"),
    (
        1,
        "the command ran and its answer is no: not certified (with --select: a clause it ran failed), a report "
        "that does not verify, reports that differ, a failing doctor step, a contract `contract validate` finds "
        "invalid",
    ),
    (
        2,
        "bad input: an option, a file, the backend, its plugin.yaml, --backend-config or --waivers, a credential "
        "a live run needs that is not set (one `error:` line)",
    ),
    (3, "internal error: a bug in the kit (rerun with --debug and report it)"),
    (130, "interrupted (Ctrl-C); 143 and 129 when stopped by SIGTERM or SIGHUP, after the same cleanup"),
)
DEBUG_VAR = "HERMES_KIT_DEBUG"


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def cmd_contract_list(args: argparse.Namespace) -> int:
    kit_contract = contract.load(args.contract)
    clauses = [
        c
        for c in kit_contract
        if (not args.group or c.group == args.group)
        and (not args.level or c.level == args.level.upper())
        and (not args.since or c.since == args.since)
    ]
    if args.json:
        _print_json([c.to_dict() for c in clauses])
        return 0
    width = max((len(c.id) for c in clauses), default=10)
    for c in clauses:
        needs = " ".join([",".join(c.capabilities)] + ([f"host:{c.host_feature}"] if c.host_feature else [])).strip()
        marks = " proposal" if c.proposal else ""
        print(f"{c.id:<{width}}  {c.level:<6}  {c.title}" + (f"  [{needs}{marks}]" if needs else ""))
    print(f"\n{len(clauses)} clause(s), contract version {kit_contract.version}")
    return 0


def cmd_contract_show(args: argparse.Namespace) -> int:
    kit_contract = contract.load(args.contract)
    try:
        clause = kit_contract.get(args.id)
    except KeyError:
        raise UsageError(f"unknown clause {args.id!r}", "pick an id from `hermes-backend-kit contract list`") from None
    if args.json:
        _print_json(clause.to_dict())
        return 0
    print(f"{clause.id}  ({clause.level} since contract {clause.since}, provided by the {clause.provided_by})")
    print(f"  {clause.title}\n")
    print(textwrap.fill(clause.statement, 88, initial_indent="  ", subsequent_indent="  "))
    print(f"\n  source:     {clause.source}")
    if clause.proposal:
        print(f"  proposal:   {clause.proposal} (SHOULD at most; checked only where the host has its feature)")
    if clause.policy:
        print(f"  kit policy: {clause.policy}")
    if clause.capabilities:
        print(f"  capability: {', '.join(clause.capabilities)}")
    if clause.host_feature:
        print(f"  host feature: {clause.host_feature} ({kit_contract.host_features[clause.host_feature]})")
    if clause.fix:
        print(f"  fix:        {clause.fix}")
    return 0


def cmd_host_diff(args: argparse.Namespace) -> int:
    from conformance.host import abi, surface_diff

    if args.hermes:
        tree = Path(args.hermes).expanduser()
    else:
        installed = abi.installed_tree()
        if installed is None:
            raise UsageError("no Hermes is installed here", "give a tree with --hermes PATH, or install hermes-agent")
        tree = Path(installed.where)
    if not (tree / "hermes_cli" / "__init__.py").is_file():
        raise UsageError(
            f"--hermes {tree}: no hermes_cli/__init__.py there",
            "give the directory holding hermes_cli/, tools/ and agent/ (site-packages for an installed one)",
        )
    release = surface_diff.tree_release(tree)
    if release is None:
        raise UsageError(f"{tree}: hermes_cli/__init__.py states no __version__", "give a Hermes release tree")
    lines, status = surface_diff.check(tree, release)
    print("\n".join(lines))
    return status


def cmd_contract_coverage(args: argparse.Namespace) -> int:
    from conformance import traceability

    kit_contract = contract.load(args.contract)
    cov = traceability.coverage(kit_contract)
    if args.json:
        _print_json(
            {
                "contract_version": kit_contract.version,
                "clauses": len(cov.by_clause),
                "covered": len(cov.covered),
                "percent": round(cov.percent, 1),
                "checks": len(cov.checks),
                "uncovered": cov.uncovered,
                "uncited_checks": cov.uncited_checks,
                "by_clause": cov.by_clause,
            }
        )
    else:
        groups: dict[str, list[int]] = {}
        for cid, checks in cov.by_clause.items():
            row = groups.setdefault(cid.split(".", 1)[0], [0, 0])
            row[0] += 1
            row[1] += bool(checks)
        for group, (total, covered) in groups.items():
            print(f"{group:<11} {covered:>3}/{total:<3} clauses have checks")
        print(
            f"\ncoverage: {len(cov.covered)}/{len(cov.by_clause)} clauses ({cov.percent:.1f} %), "
            f"{len(cov.checks)} checks"
        )
        for cid in cov.uncovered:
            print(f"  no check: {cid}")
        for nodeid in cov.uncited_checks:
            print(f"  check cites no clause: {nodeid}")
    return 0 if not cov.uncovered and not cov.uncited_checks else 1


def cmd_contract_validate(args: argparse.Namespace) -> int:
    try:
        kit_contract = contract.load(args.path)
    except contract.ContractFileError:
        raise  # unreadable: bad input (exit 2), not an invalid contract
    except contract.ContractError as exc:
        print(f"invalid: {exc.line()}", file=sys.stderr)
        for problem in filter(None, exc.why.split("; ")):
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"{kit_contract.path}: valid, version {kit_contract.version}, {len(kit_contract)} clauses")
    return 0


def cmd_report_compare(args: argparse.Namespace) -> int:
    from conformance.report import compare

    first, second = compare.load(args.first), compare.load(args.second)
    differences = compare.compare(first, second)
    for line in compare.describe(differences, versions=compare.versions_of(first, second)):
        print(line)
    return 1 if any(d.kind == "mismatch" for d in differences) else 0


def _reports(paths: list[str]) -> list[dict[str, Any]]:
    """The reports at ``paths``; ReportFileError naming the first that cannot be read."""
    from conformance.report import matrix

    return matrix.load([Path(p) for p in paths])


def cmd_report_matrix(args: argparse.Namespace) -> int:
    from conformance.report import matrix

    reports = _reports(args.reports)
    table = matrix.markdown(reports)
    if args.out:
        Path(args.out).write_text(table)
        print(f"fault matrix of {len(reports)} report(s) written to {args.out}")
    else:
        print(table, end="")
    bad = matrix.failing(reports)
    for cell in bad:
        print(f"failing: {cell}", file=sys.stderr)
    return 1 if bad else 0


def cmd_report_summary(args: argparse.Namespace) -> int:
    from conformance.report import summary

    reports = _reports(args.reports)
    for path, report in zip(args.reports, reports, strict=True):
        missing = [k for k in summary.FIELDS if k not in report]
        if missing:
            raise ReportFileError(f"{path}: not a certification report (no {', '.join(missing)})")
    for line in summary.lines(reports):
        print(line)
    return 0 if all(r["certified"] for r in reports) else 1


def cmd_report_html(args: argparse.Namespace) -> int:
    from conformance import redact
    from conformance.report import bench_plot, html

    reports = _reports([args.report])
    missing = html.missing_fields(reports[0])
    if missing:
        raise ReportFileError(f"{args.report} is not a certification report (no {', '.join(missing)})")
    bench = bench_plot.load(args.bench) if args.bench else None
    Path(args.out).write_text(redact.redact(html.render(reports[0], contract.load(), bench)), "utf-8")
    print(f"report page written to {args.out}")
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    for known in backends.KNOWN_BACKENDS.values():
        needs = (
            f" (needs the {known.extra} extra: pip install 'hermes-backend-kit[{known.extra}]')" if known.extra else ""
        )
        print(f"{known.name:<20} fake: {known.fake or '-':<10} {known.description}{needs}")
    return 0


def _certify_inputs(args: argparse.Namespace) -> None:
    """Read --backend-config and --waivers before the run (a KitError costs no suite run), and register
    what this process knows to mask: the user's credential variables and --backend-config env values."""
    from conformance import capabilities, config, fault_routes, redact, waivers

    redact.register_environ()
    if args.backend_config:
        loaded = config.load(
            args.backend_config,
            set(capabilities.declarable(contract.load())),
            run_sets=fault_routes.run_variables(args.client_faults),
        )
        redact.register_config_env(loaded.env)
    if args.waivers:
        waivers.load(args.waivers, contract.load())


def _setup_error(path: Path) -> KitError | None:
    """The setup error the run wrote to --kit-error-file, if it wrote one (its traceback kept for --debug)."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    error = KitError.from_dict(data)
    error.remote_traceback = str(data.get("traceback") or "")  # type: ignore[attr-defined]
    return error


def _live_terminal(stream: Any) -> bool:
    """Whether certify's output is a terminal that can show the run's live progress."""
    try:
        return bool(stream.isatty()) and os.environ.get("TERM", "") not in ("", "dumb")
    except (AttributeError, ValueError):
        return False


def _relay(stream: Any, to: Any) -> None:
    """Copy the run's output line by line, redacted (the run redacts too; this catches what it cannot)."""
    from conformance import redact

    for line in iter(stream.readline, ""):
        to.write(redact.redact(line))
        to.flush()
    stream.close()


def cmd_certify(args: argparse.Namespace) -> int:
    """Run the suite in a child pytest from a run-owned temp root (its cwd, --basetemp, caches), removed after."""
    import shutil
    import subprocess
    import tempfile
    import threading

    from conformance import leftovers, redact
    from conformance.report import bench_plot, html, markdown
    from conformance.report.headline import headline, must_failure_lines

    bench = bench_plot.load(args.bench) if args.bench else None  # before the run: a bad file costs no suite run
    _certify_inputs(args)
    out = Path(args.out).resolve()
    made_out = not out.exists()  # removed again when the run never starts
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / "report.json"
    report_path.unlink(missing_ok=True)
    # A name the kit knows is that backend even beside a folder of the same name (an earlier --out):
    # a directory of that name is given as a path (./NAME).
    named = args.backend in backends.KNOWN_BACKENDS
    backend = str(Path(args.backend).resolve()) if not named and Path(args.backend).exists() else args.backend
    slow = backends.KNOWN_BACKENDS[args.backend].slow_here() if named else None
    if slow:
        print(slow, flush=True)
    leftovers.sweep_orphaned(Path(tempfile.gettempdir()), "hermes-kit-certify-")  # runs that were SIGKILLed
    run_root = Path(tempfile.mkdtemp(prefix="hermes-kit-certify-"))
    leftovers.claim(run_root)
    cmd = suite_command.command(
        "-W",
        "ignore::DeprecationWarning",
        "--kit-progress",
        "--backend",
        backend,
        "--host",
        args.host,
        *(["--ignore-requires-hermes"] if args.ignore_requires_hermes else []),
        "--junitxml",
        str(out / "junit.xml"),
        "--basetemp",
        str(run_root / "pytest"),
        "--kit-error-file",
        str(run_root / "setup-error.json"),
        report=report_path,
    )
    # The run's own lines name each failing check by its file and name; pytest's summary would name them
    # again by their path relative to the run root ("../../.../test_x.py::...").
    cmd.append("-rN")
    progress_mode = args.progress
    if progress_mode == "auto":  # the child's output is a pipe to the relay: it cannot see the terminal
        progress_mode = "live" if _live_terminal(sys.stdout) else "plain"
    cmd.append(f"--progress={progress_mode}")
    if args.select:
        cmd += ["--kit-select", args.select]
    workers = args.workers
    control = args.fake_control or os.environ.get("HERMES_KIT_FAKE_CONTROL")
    if control and workers > 1:
        print("a fake started by hand serves one run at a time: certifying with one worker", flush=True)
        workers = 0
    if workers:
        cmd += ["-n", str(workers)]
    if args.fake_control:
        cmd += ["--fake-control", args.fake_control]
    for flag, value in (("--backend-config", args.backend_config), ("--fake", args.fake), ("--waivers", args.waivers)):
        if value:
            cmd += [flag, str(Path(value).resolve()) if flag != "--fake" else value]
    if args.live:
        cmd.append("--live")
    if args.call_deadline:
        cmd += ["--call-deadline", str(args.call_deadline)]
    if args.check_costs:
        cmd += ["--kit-check-costs", str(Path(args.check_costs).resolve())]
    if args.client_faults:
        routes = Path(args.client_faults)
        cmd.append(f"--client-faults={routes.resolve() if routes.suffix in ('.yaml', '.yml') else args.client_faults}")
    # The child runs in the run root, so nothing lands in the caller's directory; a module:attr
    # backend next to the caller still imports.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}
    # Everything the run creates lives under the run root, so stopping it (even by SIGKILL of its
    # workers) leaves nothing behind once the root is removed.
    (run_root / "tmp").mkdir()
    env["TMPDIR"] = str(run_root / "tmp")
    bytecode.apply(bytecode.run_cache(run_root, env), env)
    if progress_mode == "live" and _live_terminal(sys.stdout):
        size = os.get_terminal_size(sys.stdout.fileno())
        env.update(COLUMNS=str(size.columns), LINES=str(size.lines))  # what the live display may fill
    print(f"certifying {args.backend} ...", flush=True)
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=run_root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
        )
        relays = [
            threading.Thread(target=_relay, args=(proc.stdout, sys.stdout), daemon=True),
            threading.Thread(target=_relay, args=(proc.stderr, sys.stderr), daemon=True),
        ]
        for relay in relays:
            relay.start()
        returncode = proc.wait()
        for relay in relays:
            relay.join()
        setup_error = _setup_error(run_root / "setup-error.json")
    finally:
        leftovers.end_processes_under(run_root)
        shutil.rmtree(run_root, ignore_errors=True)
    if setup_error is not None:
        if made_out:
            shutil.rmtree(out, ignore_errors=True)
        raise setup_error  # bad backend, plugin.yaml, config, fake, credential: the run did not start
    if not report_path.exists():
        if returncode == 4:
            raise UsageError(
                "pytest refused the run's options (its message is above)",
                "check PYTEST_ADDOPTS and the options given to certify",
            )
        if returncode == 5 and args.select:
            if made_out:
                shutil.rmtree(out, ignore_errors=True)
            raise UsageError(
                f"--select {args.select} kept no check (pytest ran nothing)",
                "name clause ids or groups separated by commas or spaces (exec.exit-code,stdin), or give a "
                "pytest -k expression over the checks' names (silent and not half); "
                "`hermes-backend-kit contract list` lists the clause ids",
            )
        raise RuntimeError(
            f"the run ended before writing a report (pytest exit status {returncode}; its output is above)"
        )
    report = json.loads(report_path.read_text("utf-8"))
    (out / "report.md").write_text(redact.redact(markdown.render(report, contract.load())), "utf-8")
    (out / "report.html").write_text(redact.redact(html.render(report, contract.load(), bench)), "utf-8")
    (out / "badge.json").write_text(redact.redact(json.dumps(markdown.badge(report))) + "\n", "utf-8")
    written = ["report.md", "report.html", "junit.xml", "badge.json"]  # report.json: the run named it already
    if args.sign_key:
        from conformance.report import signing

        try:
            signature, key = signing.sign_file(report_path, args.sign_key)
        except KitError as exc:
            raise type(exc)(f"the report was written but not signed: {exc.what}", exc.fix, exc.why) from exc
        written.append(f"{signature.name} (key {key})")
    print(f"wrote beside it: {', '.join(written)}")
    line = headline(report)
    if report["certified"]:
        print(f"{line}: {report['backend'].get('name')}")
        return 0
    if report.get("selection"):
        # A diagnostic run answers "do the clauses I picked pass?", SHOULD ones too: its exit status says
        # that alone.
        must, should = report["summary"]["must"], report["summary"]["should"]
        failed = bool(must["fail"] or must["skipped"] or should["fail"])
        print(line, file=sys.stderr if failed else sys.stdout)
        for failure in must_failure_lines(report):
            print(failure, file=sys.stderr)
        if should["fail"] and not must["fail"]:
            print(f"{should['fail']} SHOULD clause(s) it ran failed (report.md lists them)", file=sys.stderr)
        return 1 if failed else 0
    because = report["not_certified_because"]
    more = f"; and {len(because) - 5} more (see report.md)" if len(because) > 5 else ""
    print(f"{line}: " + "; ".join(because[:5]) + more, file=sys.stderr)
    hint = _default_cwd_hint(report)
    if hint:
        print(hint, file=sys.stderr)
    hangs = _hangs(report)
    for hang in hangs[:3]:
        print(f"a backend call overran its deadline (its check failed; the run went on): {hang}", file=sys.stderr)
    if len(hangs) > 3:
        print(f"and {len(hangs) - 3} more backend call(s) overran their deadlines (see report.md)", file=sys.stderr)
    return 1


# What a shell says when it cannot enter Hermes's default working directory.
_NO_ROOT = ("cd: /root:", "cd -- /root", "/root: Permission denied", "/root: No such file or directory")


def _default_cwd_hint(report: dict[str, Any]) -> str | None:
    """One line when failing clauses could not enter /root, the cwd Hermes gives a backend that names no
    default_cwd: the fix is a setting, not the checks."""
    clauses = {
        clause["id"]
        for clause in report.get("clauses", [])
        if clause.get("verdict") == "fail"
        for check in clause.get("checks", [])
        if any(sign in str(check.get("excerpt") or "") for sign in _NO_ROOT)
    }
    if len(clauses) < 3:
        return None
    return (
        f"hint: {len(clauses)} failing clauses could not enter /root, the working directory Hermes passes a "
        "backend that names no default_cwd: set terminal.cwd in --backend-config to a directory the sandbox's "
        "user can use, or have the backend map /root to its home (as the reference backends do)"
    )


def _hangs(report: dict[str, Any]) -> list[str]:
    """The distinct backend calls that did not return within their deadline (from the checks' evidence)."""
    found: dict[str, None] = {}
    for clause in report.get("clauses", []):
        for check in clause.get("checks", []):
            text = str(check.get("excerpt") or "")
            if "CallHung: " in text and "did not return within" in text:
                found[text.split("CallHung: ", 1)[1].split("; after that hang", 1)[0]] = None
    return list(found)


def cmd_verify(args: argparse.Namespace) -> int:
    from conformance.report import files, signing, verify
    from conformance.report.headline import headline

    if bool(args.signature) != bool(args.public_key):
        raise UsageError(
            "--signature and --public-key go together",
            "give --signature and --public-key together (the signature file and the signer's public key)",
        )
    report = files.read_json(args.report)  # a file that cannot be read is bad input, not a failed verification
    found = verify.problems(report)
    signed_by = None
    if args.signature:
        try:
            signed_by = signing.verify_file(args.report, args.signature, args.public_key)
        except signing.SignatureError as exc:
            found.append(f"signature: {exc}")
    for problem in found:
        print(f"FAIL {problem}")
    if not found:
        print(f"OK {args.report}: {headline(report)}")
    print("offline verification checks " + "; ".join(verify.PROVES) + ".")
    if signed_by:
        print(
            f"signature: OK, the report's bytes were signed by key {signed_by}: the holder of its private key "
            "vouches for this run."
        )
    else:
        print(f"It cannot show {verify.CANNOT}.")
    return 1 if found else 0


def cmd_sign(args: argparse.Namespace) -> int:
    from conformance.report import signing

    target, key = signing.sign_file(args.report, args.key, args.out)
    print(f"signed {args.report} with key {key}: {target}")
    print(f"check it with: hermes-backend-kit verify {args.report} --signature {target} --public-key PUBLIC_KEY")
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    from conformance.report import signing

    private, public, key = signing.keygen(args.key)
    print(
        f"wrote the private key {private} (mode 0600: keep it secret, e.g. as a CI secret) and the public key "
        f"{public} (publish it); fingerprint {key}"
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from conformance import doctor, redact

    redact.redact_logging()  # the plugin runs in this process: what it logs is masked like the rows

    return doctor.main(
        args.backend,
        backend_config=args.backend_config,
        fake=args.fake,
        live=args.live,
        host=args.host,
        persistent=args.persistent,
        debug=_debugging(args),
    )


def cmd_fake_serve(args: argparse.Namespace) -> int:
    import shlex
    import shutil
    import tempfile

    from conformance.errors import FakeServiceError
    from fakes import process
    from fakes.services import FakeService

    try:
        options = process.options_from(args)
    except ValueError as exc:
        what, _, fix = str(exc).partition("; ")
        raise FakeServiceError(what, fix or "see `hermes-backend-kit fake serve --help`") from None
    own_root = args.root is None
    root = Path(tempfile.mkdtemp(prefix=f"kit-fake-{args.name}-")) if own_root else Path(args.root)

    def announce(fake: FakeService, control: str) -> None:
        for name, value in fake.env.items():
            print(f"export {name}={shlex.quote(value)}")
        print(f"# paths: {fake.paths_note}")
        if "vendor paths" not in fake.paths_note:
            print(
                "# commands see host temp paths, so point cwd/home settings at them (the files API also "
                "accepts the vendor paths)"
            )
        cap = f", at most {args.max_sandboxes} sandboxes per key" if args.max_sandboxes else ""
        print(f"# profile: {args.profile}{cap}")
        if options.rtt_ms or options.jitter_ms:
            print(
                f"# network: {options.rtt_ms:g} ms round trip (up to {options.jitter_ms:g} ms more each way) in "
                "front of the server (fakes/network.py)"
            )
        print(f"# control: {process.CONTROL_VAR}={shlex.quote(control)}")
        print(
            f"# run the suite against this fake (one worker): python -m pytest --pyargs conformance.checks "
            f"--backend BACKEND --fake-control {shlex.quote(control)}"
        )
        print(f"# the {args.name} fake is serving; Ctrl-C stops it", flush=True)

    try:
        return process.serve(args.name, root, options, on_ready=announce)
    except OSError as exc:
        raise FakeServiceError(
            f"could not start the {args.name} fake on {args.host}:{args.port} ({exc.strerror or exc})",
            "pick a free --port (0: any) and a writable --root",
        ) from exc
    except (RuntimeError, ValueError) as exc:
        what, _, fix = str(exc).partition("; ")
        raise FakeServiceError(
            f"could not start the {args.name} fake: {what}", fix or "rerun with --debug for the traceback"
        ) from exc
    finally:
        if own_root:
            shutil.rmtree(root, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    from fakes.process import add_limit_options
    from fakes.services import SERVERS

    parser = argparse.ArgumentParser(
        prog="hermes-backend-kit",
        description="Conformance kit for Hermes terminal backends.",
        epilog=_exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hermes-backend-kit {__version__}")
    parser.add_argument(
        "--debug", action="store_true", default=False, help=f"show the traceback behind an error (also: {DEBUG_VAR}=1)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("contract", help="list, show, validate the contract and its check coverage")
    csub = c.add_subparsers(dest="action", required=True)
    lst = csub.add_parser("list", help="list clauses")
    lst.add_argument("--group")
    lst.add_argument("--level", choices=["MUST", "SHOULD", "MAY", "must", "should", "may"])
    lst.add_argument(
        "--since", metavar="VERSION", help="only the clauses this contract version made required, e.g. 2.0"
    )
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_contract_list)
    show = csub.add_parser("show", help="show one clause")
    show.add_argument("id")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_contract_show)
    cov = csub.add_parser("coverage", help="which clauses have checks (exit 1 if any has none)")
    cov.add_argument("--json", action="store_true")
    cov.set_defaults(func=cmd_contract_coverage)
    val = csub.add_parser("validate", help="validate a contract file against the schema")
    val.add_argument("path", nargs="?")
    val.set_defaults(func=cmd_contract_validate)
    for p in (lst, show, cov):
        p.add_argument("--contract", default=None, help=argparse.SUPPRESS)

    r = sub.add_parser("report", help="work with certification reports")
    rsub = r.add_subparsers(dest="action", required=True)
    cmp_ = rsub.add_parser("compare", help="compare the verdicts of two reports clause by clause")
    cmp_.add_argument("first")
    cmp_.add_argument("second")
    cmp_.set_defaults(func=cmd_report_compare)
    mat = rsub.add_parser("matrix", help="the fault matrix (fault x backend) of several reports; exit 1 on a failure")
    mat.add_argument("reports", nargs="+", help="report.json files, one per backend")
    mat.add_argument("--out", help="write the Markdown table here instead of printing it")
    mat.set_defaults(func=cmd_report_matrix)
    summ = rsub.add_parser(
        "summary",
        help="one line per report (verdict, profile, MUST and SHOULD counts, time); "
        "exit 1 unless every backend is certified",
    )
    summ.add_argument("reports", nargs="+", help="report.json files, one per backend")
    summ.set_defaults(func=cmd_report_summary)
    page = rsub.add_parser(
        "html",
        help="one self-contained HTML page of a report (what certify writes as "
        "report.html), optionally with benchmark plots",
    )
    page.add_argument("report", help="a report.json")
    page.add_argument("--bench", metavar="RESULTS.json", help="benchmark results to plot (bench/results.json)")
    page.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    page.set_defaults(func=cmd_report_html)

    h = sub.add_parser("host", help="the Hermes the kit stands in for")
    hsub = h.add_subparsers(dest="host_command", required=True)
    hdiff = hsub.add_parser(
        "diff",
        help="compare the stand-ins' names and signatures with a Hermes tree (exit 1 on an unreviewed difference)",
    )
    hdiff.add_argument(
        "--hermes",
        metavar="PATH",
        help="a Hermes tree (the directory holding hermes_cli/, tools/, agent/); default: the installed one",
    )
    hdiff.set_defaults(func=cmd_host_diff)
    b = sub.add_parser("backends", help="list the backends the kit knows by name")
    b.set_defaults(func=cmd_backends)

    from conformance.scaffold.command import add_parser as add_init_plugin

    add_init_plugin(sub)

    from conformance.bench.command import add_parser as add_bench

    add_bench(sub)

    from conformance.workspace import add_parser as add_workspace

    add_workspace(sub)

    c = sub.add_parser(
        "certify", help="run the suite and write report.json, report.md, report.html, junit.xml, badge.json"
    )
    c.add_argument(
        "--backend",
        required=True,
        metavar="SPEC",
        help="the backend to certify: a plugin directory (plugin.yaml and __init__.py), ep:NAME (an "
        "installed hermes_agent.plugins entry point), package.module[:attr], a name from "
        "`hermes-backend-kit backends`, or hermes:local / hermes:ssh (hermes-agent's own environments, "
        "with --host hermes; docs/hermes-builtins.md)",
    )
    c.add_argument(
        "--backend-config",
        metavar="FILE",
        help="YAML for the backend: terminal (merged into Hermes's terminal config), env (variables "
        "for the run, ${NAME} taken from yours), capabilities and disclaims (for a plugin you "
        "cannot edit), persistent_path (the directory a persistent sandbox keeps)",
    )
    mode = c.add_mutually_exclusive_group()
    mode.add_argument(
        "--fake",
        metavar="VENDOR",
        help="start the kit's fake of VENDOR (upstash, cloudflare, deepinfra) on loopback and export "
        "its variables; implied for the kit's reference backends",
    )
    mode.add_argument(
        "--live",
        action="store_true",
        help="use the real service with the credentials in your environment (no fake: clauses "
        "that need one are unverified)",
    )
    c.add_argument(
        "--fake-control",
        metavar="ADDRESS",
        help="certify against the fake started by hand with `fake serve` at this control address "
        "(default: $HERMES_KIT_FAKE_CONTROL); runs one worker",
    )
    c.add_argument(
        "--waivers",
        metavar="FILE",
        help="YAML list of waived MUST clauses (clause, reason, issue, expires); the file must exist "
        "when given, so leave the option out when you have none",
    )
    c.add_argument(
        "--host",
        default="auto",
        choices=["auto", "builtin", "hermes"],
        help="the Hermes modules the plugin runs against: hermes (the installed hermes-agent, "
        "stand-ins for what it lacks), builtin (the kit's stand-ins), auto (hermes where "
        "importable; default)",
    )
    c.add_argument(
        "--ignore-requires-hermes",
        action="store_true",
        help="judge the plugin on the installed Hermes even when its requires_hermes excludes that "
        "release (for comparing hosts; the report's host note says so)",
    )
    c.add_argument("--out", required=True, help="directory for the report files")
    c.add_argument(
        "--bench",
        metavar="RESULTS.json",
        help="benchmark results (bench/results.json from `nox -s bench`) to plot in report.html",
    )
    c.add_argument(
        "--workers",
        type=int,
        default=backends.KnownBackend.workers,
        help=f"pytest-xdist workers (0: none; default {backends.KnownBackend.workers}: checks that wait overlap)",
    )
    c.add_argument(
        "--select",
        metavar="EXPR",
        help="a diagnostic run of some clauses: clause ids and groups (exec, exec.exit-code,stdin) or a "
        "pytest -k expression over the checks' names; never certified, and the clauses it leaves out are "
        "'not run'",
    )
    c.add_argument(
        "--progress",
        choices=("auto", "live", "plain", "off"),
        default="auto",
        help="live: one line per contract group redrawn in place; plain: a line as each group completes; "
        "off: pytest's own output; auto: live on a terminal, plain otherwise (default: %(default)s)",
    )
    c.add_argument(
        "--call-deadline",
        type=float,
        metavar="SECONDS",
        help="seconds the kit waits for loading the plugin, create_environment() and cleanup() "
        "before failing the check (default 60)",
    )
    c.add_argument("--sign-key", metavar="KEY", help="sign report.json with this Ed25519 private key (report.json.sig)")
    c.add_argument(
        "--check-costs",
        metavar="PATH",
        help="append each check's wall time, CPU seconds and environments created to PATH (JSON lines; "
        "what `nox -s bench` reads for its suite figures)",
    )
    c.add_argument(
        "--client-faults",
        nargs="?",
        const="on",
        metavar="on|off|VENDOR|ROUTES.yaml|tcp:HOST:PORT",
        help="inject transport faults in the backend's own clients instead of the fake's script, or "
        "(tcp:HOST:PORT) in a TCP proxy in front of that endpoint (docs/transport-faults.md); "
        "automatic for a live run of a backend the kit knows",
    )
    c.set_defaults(func=cmd_certify)

    d = sub.add_parser("doctor", help="a bounded health check of a backend, one row per step")
    d.add_argument("--backend", required=True)
    d.add_argument("--backend-config")
    dmode = d.add_mutually_exclusive_group()
    dmode.add_argument("--fake")
    dmode.add_argument("--live", action="store_true")
    d.add_argument("--host", default="auto", choices=["auto", "builtin", "hermes"])
    d.add_argument("--persistent", action="store_true", help="check a persistent environment (kept on cleanup)")
    d.set_defaults(func=cmd_doctor)

    v = sub.add_parser(
        "verify",
        help="re-derive a report offline (verdicts, summary, profile, certificate, "
        "kit and check hashes) and check its signature",
    )
    v.add_argument("report")
    v.add_argument("--signature", metavar="SIG", help="detached signature file (from `sign` or `certify --sign-key`)")
    v.add_argument("--public-key", metavar="PUB", help="the signer's Ed25519 public key")
    v.set_defaults(func=cmd_verify)

    s = sub.add_parser("sign", help="sign report.json with an Ed25519 private key (a detached signature file)")
    s.add_argument("report")
    s.add_argument("--key", required=True, metavar="KEY", help="Ed25519 private key (PEM or OpenSSH)")
    s.add_argument("--out", metavar="SIG", help="signature file (default: REPORT.sig)")
    s.set_defaults(func=cmd_sign)

    k = sub.add_parser("keygen", help="make an Ed25519 key pair for signing reports")
    k.add_argument(
        "--key", required=True, metavar="PATH", help="private key file to write; the public key goes to PATH.pub"
    )
    k.set_defaults(func=cmd_keygen)

    f = sub.add_parser("fake", help="run a fake vendor service")
    fsub = f.add_subparsers(dest="action", required=True)
    serve = fsub.add_parser(
        "serve",
        help="serve a fake in the foreground and print the variables to export and its control address",
        description="Serve a fake vendor service in the foreground.  It prints the vendor's variables to export "
        "and a control address: `--fake-control ADDRESS` (or HERMES_KIT_FAKE_CONTROL) runs the "
        "conformance suite against this fake, with the world view and fault injection.  The vendor "
        "profile keeps the real sandbox caps (upstash 10 boxes, deepinfra 5 sandboxes), which a "
        "suite run exceeds: lift them with --max-sandboxes 1000 (or take --profile suite).",
    )
    serve.add_argument("name", choices=SERVERS)
    serve.add_argument(
        "--root", default=None, help="directory for the fake's sandboxes (default: a temp dir, removed on exit)"
    )
    add_limit_options(serve, default_profile="vendor")
    serve.set_defaults(func=cmd_fake_serve)
    return parser


def _exit_codes_help() -> str:
    rows = "\n".join(
        textwrap.fill(meaning, 96, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        for code, meaning in EXIT_CODES
    )
    return (
        f"exit codes (every command):\n{rows}\n\nBad input is one line on stderr, `error: WHAT — FIX`; "
        f"--debug or {DEBUG_VAR}=1 adds the traceback."
    )


def _debugging(args: argparse.Namespace | None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_VAR, "") not in ("", "0")


def report_error(exc: KitError, *, debug: bool) -> None:
    """``error: <what> — <fix>`` (and ``  why: ...``) on stderr, redacted; the traceback first when debugging."""
    from conformance import redact

    redact.register_environ()  # a message or traceback may quote a value from the user's environment
    if debug:
        remote = getattr(exc, "remote_traceback", "")
        print(redact.redact(remote or "".join(traceback.format_exception(exc))), file=sys.stderr, end="")
    print(redact.redact(f"error: {exc.line()}"), file=sys.stderr)
    if exc.why:
        print(redact.redact(f"  why: {' '.join(exc.why.split())}"), file=sys.stderr)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the command is so that its cleanup runs as for Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into Stopped while a command runs: a run stopped by CI, nox or a closed
    terminal still ends its processes and removes its temp root (exit 128 + the signal's number)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code is one of EXIT_CODES."""
    words = list(sys.argv[1:] if argv is None else argv)
    # --debug is accepted after the command too (`certify ... --debug`), where a user adds it when a run fails.
    late_debug = "--debug" in words[1:]
    words = words[:1] + [w for w in words[1:] if w != "--debug"]
    args = build_parser().parse_args(words)  # a usage error exits 2 here, as argparse does
    debug = args.debug = late_debug or _debugging(args)
    try:
        with _stopped_by_signals():
            return int(args.func(args) or 0)
    except KitError as exc:
        report_error(exc, debug=debug)
        return 2
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        return _reader_went_away()
    except Exception as exc:
        from conformance import redact

        redact.register_environ()
        if debug:
            print(redact.redact("".join(traceback.format_exception(exc))), file=sys.stderr, end="")
        problem = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        print(
            redact.redact(f"error: internal error ({problem}) — rerun with --debug and report it with the traceback"),
            file=sys.stderr,
        )
        return 3


def _reader_went_away() -> int:
    """The reader of stdout closed it (``| head``): what was asked for has been read, so this is no error.
    stdout goes to /dev/null so Python's flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""files: the file tools' shell commands, fetch_file and the temp dir.

Writes go the way ShellFileOperations writes (content on stdin into a temp
file in the same directory, then mv); every verdict is taken through a
second channel: sha256sum or base64 through exec, a base64 directory
listing for names, never only a read back through the write path.
"""

from __future__ import annotations

import base64
import importlib
import random
import shlex

import pytest

from conformance.checks._support import nonce, not_applicable, out, rc, run, sha256_hex
from conformance.host.calls import bounded
from conformance.host.drivers import FileOps

pytestmark = pytest.mark.usefixtures("kit")

OP_TIMEOUT = 10  # per file-tool command; a stuck stdin stream fails fast instead of hanging
# Hermes's callers always pass a cap; any cap above the fixture's size copies it whole.
FETCH_MAX_BYTES = 20 * 1024 * 1024


def _home(env) -> str:
    home = out(run(env, 'printf "%s" "$HOME"', timeout=10)).strip()
    assert home.startswith("/"), f"$HOME in the sandbox is {home!r}, not an absolute path"
    return home


def _workdir(env, label: str) -> str:
    return f"{_home(env)}/{nonce(label)}"


def _write(ops: FileOps, path: str, content: str) -> None:
    result = ops.write_file(path, content)
    assert rc(result) == 0, f"write_file({path!r}) exited {rc(result)}: {out(result)[-300:]!r}"
    assert "stdin_error" not in result, f"write_file({path!r}) reported a stdin error: {result['stdin_error']!r}"


def _assert_content(ops: FileOps, path: str, data: bytes) -> None:
    digest = ops.sha256(path)
    assert digest is not None, f"sha256sum through exec cannot read {path!r}"
    assert digest == sha256_hex(data), (
        f"{path!r}: sha256sum through exec is {digest}, expected {sha256_hex(data)} for the {len(data)} bytes written"
    )
    back = ops.read_bytes(path)
    assert back is not None, f"base64 through exec cannot read {path!r}"
    assert back == data, f"{path!r} reads back {len(back)} bytes through base64, expected {len(data)} identical bytes"


# Content that trips naive transports: quotes, shell syntax, heredoc-looking
# lines, CRLF, tabs, backslashes, NUL-free non-ASCII, no final newline.
TRICKY = (
    "first line\n"
    "quotes: ' \" `backtick` $HOME ${PATH} $(echo no) \\n \\\\ \n"
    "EOF\nHERMES_STDIN_x\n'EOF'\n"
    "crlf line\r\n\ttabbed\n"
    "unicode: héllo wörld ✓ 日本語 🚀\n"
    "\n\n"
    "last line without newline"
)


@pytest.mark.clause("files.write-read")
def test_written_file_reads_back_and_verifies(env):
    ops = FileOps(env, timeout=OP_TIMEOUT)
    path = f"{_workdir(env, 'write')}/sub dir/note.txt"
    _write(ops, path, TRICKY)
    _assert_content(ops, path, TRICKY.encode("utf-8"))
    # An overwrite replaces the file in place (mv over an existing file).
    _write(ops, path, "replaced\n")
    _assert_content(ops, path, b"replaced\n")


@pytest.mark.clause("files.read-probe")
def test_compound_read_probe_returns_every_section(env):
    ops = FileOps(env, timeout=OP_TIMEOUT)
    path = f"{_workdir(env, 'probe')}/probe.txt"
    lines = [f"line {i:03d} {'ünï' if i % 7 == 0 else 'abc'} {'x' * (i % 50)}\n" for i in range(1, 201)]
    content = "".join(lines)
    data = content.encode("utf-8")
    assert len(data) > 4096  # so the base64 section is a true head, not the whole file
    _write(ops, path, content)
    parts = ops.read_probe(path, first_line=10, last_line=20)
    assert parts is not None, (
        "the compound read probe did not come back with all five sentinels in order (or it exited non-zero)"
    )
    assert parts["size"].strip() == str(len(data)), f"size section {parts['size']!r}, expected {len(data)}"
    assert parts["lines"].strip() == str(len(lines)), f"line-count section {parts['lines']!r}, expected {len(lines)}"
    expected_range = "".join(lines[9:20])
    assert parts["range"] == expected_range, (
        f"line-range section differs: got {parts['range'][:200]!r}..., expected {expected_range[:200]!r}..."
    )
    head = base64.b64decode("".join(parts["head_b64"].split()))
    assert head == data[:4096], (
        f"base64 head section decodes to {len(head)} bytes that differ from the file's first 4096"
    )


@pytest.mark.clause("files.binary")
def test_binary_file_with_every_byte_value_reads_back(env):
    ops = FileOps(env, timeout=OP_TIMEOUT)
    rng = random.Random(20240501)
    data = bytes(range(256)) + bytes(reversed(range(256))) + rng.randbytes(16 * 1024) + b"\x00\xff\r\n\x1a"
    path = f"{_workdir(env, 'binary')}/blob.bin"
    encoded = base64.b64encode(data).decode()
    result = run(
        env,
        f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && printf '%s' '{encoded}' | base64 -d > {shlex.quote(path)}",
        timeout=OP_TIMEOUT,
    )
    assert rc(result) == 0, f"creating the binary file with base64 -d failed: {out(result)[-300:]!r}"
    back = ops.read_bytes(path)
    assert back is not None, "reading the binary file with base64 through exec failed"
    if back != data:
        first = next((i for i, (a, b) in enumerate(zip(back, data, strict=False)) if a != b), min(len(back), len(data)))
        raise AssertionError(
            f"base64 read of a {len(data)}-byte binary file decodes to {len(back)} bytes; "
            f"first difference at byte {first}"
        )
    assert ops.sha256(path) == sha256_hex(data), "sha256sum of the binary file differs from the bytes shipped"


@pytest.mark.clause("files.fetch")
def test_fetch_file_and_realpath(env, tmp_path):
    """Called as Hermes's media delivery calls them: ``max_bytes`` always passed by keyword, the
    destination in an existing directory, the copy judged by the file written, not a return value."""
    fetch_error = importlib.import_module("tools.environments.base").FileFetchError
    ops = FileOps(env, timeout=OP_TIMEOUT)
    rng = random.Random(7)
    data = bytes(range(256)) + rng.randbytes(16 * 1024)
    work = _workdir(env, "fetch")
    remote = f"{work}/payload.bin"
    link = f"{work}/link to payload"
    encoded = base64.b64encode(data).decode()
    result = run(
        env,
        f"mkdir -p {shlex.quote(work)} && printf '%s' '{encoded}' | base64 -d > {shlex.quote(remote)} "
        f"&& ln -s payload.bin {shlex.quote(link)}",
        timeout=OP_TIMEOUT,
    )
    assert rc(result) == 0, f"setting up the fetch fixture failed: {out(result)[-300:]!r}"
    assert ops.sha256(remote) == sha256_hex(data), "the fixture file was not written intact"

    dest = tmp_path / "payload.bin"
    bounded(env.fetch_file, remote, str(dest), max_bytes=FETCH_MAX_BYTES, deadline=60, what="fetch_file")
    assert dest.is_file(), f"fetch_file({remote!r}, max_bytes={FETCH_MAX_BYTES}) wrote nothing at {dest}"
    got = dest.read_bytes()
    assert got == data, f"fetch_file copied {len(got)} bytes that differ from the {len(data)}-byte sandbox file"

    resolved = bounded(env.fetch_realpath, link, deadline=60, what="fetch_realpath")
    assert resolved == remote, f"fetch_realpath({link!r}) returned {resolved!r}, expected {remote!r}"

    with pytest.raises(fetch_error):
        bounded(
            env.fetch_file,
            f"{work}/missing-{nonce('m')}",
            str(tmp_path / "missing"),
            max_bytes=FETCH_MAX_BYTES,
            deadline=60,
            what="fetch_file(missing)",
        )
    with pytest.raises(fetch_error):
        bounded(
            env.fetch_file, remote, str(tmp_path / "too-big"), max_bytes=1024, deadline=60, what="fetch_file(oversized)"
        )
    assert not (tmp_path / "too-big").exists() or (tmp_path / "too-big").stat().st_size <= 1024, (
        "fetch_file of an oversized file wrote more than max_bytes on the host"
    )


@pytest.mark.clause("files.temp-dir")
def test_temp_dir_is_absolute_and_writable(env):
    get_temp_dir = getattr(env, "get_temp_dir", None)
    if not callable(get_temp_dir):
        not_applicable("the environment has no get_temp_dir(); the host falls back to /tmp")
    tmp = get_temp_dir()
    assert isinstance(tmp, str) and tmp.startswith("/"), f"get_temp_dir() returned {tmp!r}, not an absolute path"
    value = nonce("tmp")
    q = shlex.quote(tmp)
    result = run(
        env,
        f"[ -d {q} ] || {{ echo not-a-directory; exit 3; }}; "
        f"f=$(mktemp -p {q} kit-tmp.XXXXXX) || exit 4; printf '%s' {value} > \"$f\" || exit 5; "
        f'cat "$f"; rm -f "$f"',
        timeout=10,
    )
    assert rc(result) == 0, f"get_temp_dir() {tmp!r} is not a writable directory in the sandbox: {out(result)!r}"
    assert out(result).strip() == value, f"a file written in {tmp!r} read back as {out(result)!r}"


ODD_NAMES = (
    "with space.txt",
    'it\'s "quoted".txt',
    "ünïcödé 日本語 🚀.txt",
    "dollar $HOME `tick` (paren).txt",
)


@pytest.mark.clause("files.odd-paths")
def test_paths_with_spaces_quotes_and_unicode(env):
    ops = FileOps(env, timeout=OP_TIMEOUT)
    work = f"{_workdir(env, 'odd')}/dír with späce"
    for i, name in enumerate(ODD_NAMES):
        content = f"file {i}: {name}\n"
        _write(ops, f"{work}/{name}", content)
        _assert_content(ops, f"{work}/{name}", content.encode("utf-8"))
    # Third channel: the names on disk, base64-encoded so no transport can mangle them on the way back.
    listing = run(
        env,
        f"cd {shlex.quote(work)} && for f in *; do printf '%s' \"$f\" | base64 | tr -d '\\n'; echo; done",
        timeout=OP_TIMEOUT,
    )
    assert rc(listing) == 0, f"listing {work!r} failed: {out(listing)[-300:]!r}"
    names = {base64.b64decode(line).decode("utf-8", "replace") for line in out(listing).split()}
    assert names == set(ODD_NAMES), f"names on disk {sorted(names)} differ from the names written {sorted(ODD_NAMES)}"


@pytest.mark.clause("files.large-write")
def test_two_mib_write_verifies(env):
    ops = FileOps(env, timeout=30)
    rng = random.Random(2)
    atoms = [f"{rng.getrandbits(64):016x} {'ü' * (i % 5)} line {i}\n" for i in range(512)]
    chunks, size, i = [], 0, 0
    while size < 2 * 1024 * 1024:
        atom = atoms[i % len(atoms)]
        chunks.append(atom)
        size += len(atom.encode("utf-8"))
        i += 1
    content = "".join(chunks)
    data = content.encode("utf-8")
    path = f"{_workdir(env, 'large')}/large.txt"
    _write(ops, path, content)
    size_out = out(run(env, f"wc -c < {shlex.quote(path)}", timeout=OP_TIMEOUT)).strip()
    assert size_out == str(len(data)), f"a {len(data)}-byte write left a file of {size_out!r} bytes"
    digest = ops.sha256(path)
    assert digest == sha256_hex(data), f"sha256sum of the 2 MiB file is {digest}, expected {sha256_hex(data)}"

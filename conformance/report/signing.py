"""Detached Ed25519 signatures over report.json, through the ``cryptography`` package.

A signature binds the report file's exact bytes to a key: whoever holds the
private key (a CI secret, say) vouches that this report came out of a run it
made.  The signature file is JSON:

    {"format": "hermes-backend-kit-signature/1", "algorithm": "ed25519",
     "signed_file": "report.json", "sha256": "<hex of the report's bytes>",
     "public_key": "sha256:<hex of the raw public key>", "signature": "<base64>"}

Only ``signature`` decides; ``sha256`` and ``public_key`` let a failure say
why (the report changed, or another key signed it).  Keys are PEM files
(PKCS#8 private, SubjectPublicKeyInfo public); OpenSSH Ed25519 keys work too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from conformance.errors import InputFileError, SignatureError, file_problem

SIGNATURE_FORMAT = "hermes-backend-kit-signature/1"
# Signed before the report's bytes, so a signature over a report cannot be passed off as one over anything else.
CONTEXT = b"hermes-backend-kit report.json signature v1\n"
INSTALL = "pip install 'hermes-backend-kit[sign]' (the cryptography package)"


_FILES = {  # what each file read here is, and where the right one comes from
    "private key": "pass the private key `hermes-backend-kit keygen` wrote",
    "public key": "pass the public key (the .pub file `hermes-backend-kit keygen` wrote)",
    "signature": "pass the signature file `hermes-backend-kit sign` or `certify --sign-key` wrote",
    "report": "pass a report.json written by `hermes-backend-kit certify`",
}


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise SignatureError("signing and signature checks need the cryptography package", INSTALL) from None
    return ed25519


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputFileError(f"{what} {path} does not exist", _FILES[what]) from None
    except OSError as exc:
        raise InputFileError(f"cannot read {what} {path} ({file_problem(exc)})", _FILES[what]) from None


def fingerprint(public_key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def load_private_key(path: str | Path) -> Any:
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    data = _read(path, "private key")
    key = None
    for loader in (serialization.load_pem_private_key, serialization.load_ssh_private_key):
        try:
            key = loader(data, password=None)
            break
        except TypeError:
            raise SignatureError(
                f"private key {path} is encrypted",
                "give an unencrypted Ed25519 key (keep it in your CI's secret store)",
            ) from None
        except Exception:  # ValueError, or UnsupportedAlgorithm for what the other format's parser cannot read
            continue
    if key is None:
        raise SignatureError(
            f"private key {path} is not a PEM or OpenSSH private key", "make one with `hermes-backend-kit keygen`"
        )
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SignatureError(f"private key {path} is not an Ed25519 key", "make one with `hermes-backend-kit keygen`")
    return key


def load_public_key(path: str | Path) -> Any:
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    data = _read(path, "public key")
    if b"PRIVATE KEY" in data:
        raise SignatureError(f"{path} is a private key", "give the public key (the .pub file keygen wrote)")
    key = None
    for loader in (serialization.load_pem_public_key, serialization.load_ssh_public_key):
        try:
            key = loader(data)
            break
        except Exception:  # ValueError, or UnsupportedAlgorithm for what the other format's parser cannot read
            continue
    if key is None:
        raise SignatureError(f"public key {path} is not a PEM or OpenSSH public key", _FILES["public key"])
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise SignatureError(f"public key {path} is not an Ed25519 key", _FILES["public key"])
    return key


def keygen(private_path: str | Path) -> tuple[Path, Path, str]:
    """Write a new key pair: ``private_path`` (mode 0600) and ``private_path``.pub; return both and the fingerprint."""
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    private = Path(private_path)
    public = private.with_name(private.name + ".pub")
    for path in (private, public):
        if path.exists():
            raise SignatureError(f"{path} exists and keygen never overwrites a key", "pick another path")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        private.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        public.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
    except OSError as exc:
        raise SignatureError(
            f"cannot write the key pair at {private} ({file_problem(exc)})",
            "pass --key with a path in a writable directory",
        ) from None
    return private, public, fingerprint(key.public_key())


def sign_bytes(data: bytes, key: Any, *, name: str = "report.json") -> dict[str, Any]:
    return {
        "format": SIGNATURE_FORMAT,
        "algorithm": "ed25519",
        "signed_file": name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "public_key": fingerprint(key.public_key()),
        "signature": base64.b64encode(key.sign(CONTEXT + data)).decode("ascii"),
    }


def sign_file(report_path: str | Path, key_path: str | Path, out: str | Path | None = None) -> tuple[Path, str]:
    """Sign ``report_path``; write the signature (default: REPORT.sig); return its path and the key's fingerprint."""
    key = load_private_key(key_path)
    report = Path(report_path)
    document = sign_bytes(_read(report, "report"), key, name=report.name)
    target = Path(out) if out else report.with_name(report.name + ".sig")
    try:
        target.write_text(json.dumps(document, indent=2) + "\n", "utf-8")
    except OSError as exc:
        raise SignatureError(
            f"cannot write the signature {target} ({file_problem(exc)})",
            "pass --out with a path in a writable directory",
        ) from None
    return target, document["public_key"]


def read_signature(path: str | Path) -> dict[str, Any]:
    raw = _read(path, "signature")
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise SignatureError(f"signature {path} is not a signature file (not JSON)", _FILES["signature"]) from None
    if not isinstance(document, dict) or document.get("format") != SIGNATURE_FORMAT:
        raise SignatureError(f"signature {path} is not a {SIGNATURE_FORMAT} file", _FILES["signature"])
    if document.get("algorithm") != "ed25519":
        raise SignatureError(
            f"signature {path} uses algorithm {document.get('algorithm')!r}",
            "sign with `hermes-backend-kit sign` (only ed25519 is known)",
        )
    try:
        document["_raw"] = base64.b64decode(str(document.get("signature", "")), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError(
            f"signature {path} is garbled: its signature field is not base64", "sign the report again"
        ) from None
    if len(document["_raw"]) != 64:
        raise SignatureError(
            f"signature {path} is garbled: an Ed25519 signature has 64 bytes, this one {len(document['_raw'])}",
            "sign the report again",
        )
    return document


def verify_file(report_path: str | Path, signature_path: str | Path, public_key_path: str | Path) -> str:
    """The signing key's fingerprint when the signature holds; SignatureError saying why not otherwise."""
    from cryptography.exceptions import InvalidSignature

    key = load_public_key(public_key_path)
    document = read_signature(signature_path)
    data = _read(report_path, "report")
    try:
        key.verify(document["_raw"], CONTEXT + data)
    except InvalidSignature:
        if document.get("public_key") != fingerprint(key):
            raise SignatureError(
                f"the signature was made by key {document.get('public_key')}, not by the public "
                f"key given ({fingerprint(key)})",
                "pass the signer's public key",
            ) from None
        if document.get("sha256") != hashlib.sha256(data).hexdigest():
            raise SignatureError(
                f"{report_path} changed after it was signed (its sha256 is not the signed one)",
                "do not trust this report; get the signed original",
            ) from None
        raise SignatureError(
            f"the signature in {signature_path} does not match {report_path} and the key given "
            "(the signature file was altered)",
            "do not trust this report; get the signed original",
        ) from None
    return fingerprint(key)

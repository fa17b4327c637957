"""Ed25519 signatures of a bundle's manifest (the cryptography package).

`manifest.sig` holds the hex signature of the SHA-256 digest of `manifest.json`'s bytes; the
manifest hashes every other file but `timings.json`, so the signature covers the bundle. Keys
are PEM files: PKCS#8 for the private key, SubjectPublicKeyInfo for the public one. Ed25519
signatures are deterministic, so a signed bundle stays byte-identical from run to run.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from gdv.evidence.bundle import EvidenceError, require

SIGNATURE_FILE = "manifest.sig"


def _serialization() -> Any:
    require("cryptography", "signing evidence")
    from cryptography.hazmat.primitives import serialization

    return serialization


def keygen(private_path: str | os.PathLike, public_path: str | os.PathLike) -> None:
    """Write a new Ed25519 key pair (the private key readable by its owner only)."""
    serialization = _serialization()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    Path(public_path).write_bytes(public)


def _read(path: str | os.PathLike, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise EvidenceError(f"cannot read the {what} {os.fspath(path)!r}: {e.strerror}") from None


def load_private_key(path: str | os.PathLike) -> Any:
    """The Ed25519 private key in the PEM file `path`."""
    serialization = _serialization()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(_read(path, "signing key"), password=None)
    except (ValueError, TypeError) as e:
        raise EvidenceError(f"{os.fspath(path)}: not an unencrypted PEM private key: {e}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise EvidenceError(f"{os.fspath(path)}: not an Ed25519 key")
    return key


def load_public_key(path: str | os.PathLike) -> Any:
    """The Ed25519 public key in the PEM file `path`."""
    serialization = _serialization()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(_read(path, "trust key"))
    except (ValueError, TypeError) as e:
        raise EvidenceError(f"{os.fspath(path)}: not a PEM public key: {e}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise EvidenceError(f"{os.fspath(path)}: not an Ed25519 public key")
    return key


def sign(key: Any, manifest: bytes) -> str:
    """The hex signature (with a final newline) of the digest of `manifest`."""
    return key.sign(hashlib.sha256(manifest).digest()).hex() + "\n"


def check(key: Any, manifest: bytes, signature: str) -> bool:
    """Does `signature` (as `sign` wrote it) sign the digest of `manifest` under `key`?"""
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(bytes.fromhex(signature.strip()), hashlib.sha256(manifest).digest())
    except (InvalidSignature, ValueError):
        return False
    return True

"""Sign an adapter directory the way the portal verifies it: a detached signature over the
canonical manifest of its two files (the portal's adapters/validation/report.py; tests/client
checks both give the same bytes)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from lora_portal_client.errors import usage_error

MANIFEST_FORMAT = "lora-portal/manifest/v1"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
PASSPHRASE_ENV = "LORA_PORTAL_KEY_PASSPHRASE"
# The curves the portal accepts, with the hash it verifies each with.
EC_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
}


@dataclass(frozen=True)
class FileDigest:
    name: str
    size: int
    sha256: str


def file_digest(path: Path) -> FileDigest:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return FileDigest(path.name, size, digest.hexdigest())


def canonical_manifest(files: list[FileDigest]) -> bytes:
    document = {
        "format": MANIFEST_FORMAT,
        "files": [
            {"name": f.name, "sha256": f.sha256, "size": f.size}
            for f in sorted(files, key=lambda f: f.name)
        ],
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign_directory(directory: Path, key_path: Path) -> bytes:
    key = load_private_key(key_path)
    message = canonical_manifest([file_digest(directory / name) for name in ADAPTER_FILES])
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(message)
    return key.sign(message, ec.ECDSA(EC_HASHES[key.curve.name]()))


def load_private_key(path: Path) -> ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey:
    try:
        pem = path.read_bytes()
    except OSError as exc:
        raise usage_error("sign.key_unreadable", f"Cannot read the key {path}: {exc}") from None
    passphrase = os.environ.get(PASSPHRASE_ENV)
    try:
        key = serialization.load_pem_private_key(
            pem, password=passphrase.encode() if passphrase else None
        )
    except TypeError:
        raise usage_error(
            "sign.key_encrypted", f"{path} is encrypted: set {PASSPHRASE_ENV} to its passphrase."
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise usage_error(
            "sign.key_invalid", f"{path} is not a PEM private key (or the passphrase is wrong)."
        ) from None
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name in EC_HASHES:
        return key
    raise usage_error(
        "sign.key_unsupported",
        f"{path}: the portal verifies Ed25519 and ECDSA P-256/P-384 keys only.",
    )

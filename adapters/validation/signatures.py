"""Signature verification against a tenant's registered public keys, offline.

Two formats are accepted:
- OpenSSF model-signing (v1.x, "key" method): a Sigstore bundle (JSON) holding a DSSE envelope
  whose payload is an in-toto statement listing every file's sha256. Verified here with
  `cryptography` from the hashes of our own streaming pass: model-signing's own verifier re-reads
  the model from a local directory, which would be a second pass and needs files on disk.
- A detached signature (raw bytes or base64) by an ECDSA P-256/P-384 or Ed25519 key over
  the portal's canonical manifest bytes (report.canonical_manifest).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from adapters.validation.codes import Issue, issue
from adapters.validation.report import FileDigest, canonical_manifest
from adapters.validation.strict_json import StrictJSONError, loads_strict

MAX_SIGNATURE_BYTES = 1 << 20
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
IN_TOTO_STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MODEL_SIGNING_PREDICATE = "https://model_signing/signature/v1.0"
# The one list of supported EC curves (model-signing's): the algorithm a key is shown as, and
# the hash its ECDSA signatures use. Key registration (tenants.services.signing_keys) accepts these only.
EC_CURVES: dict[str, tuple[str, type[hashes.HashAlgorithm]]] = {
    "secp256r1": ("ecdsa-p256", hashes.SHA256),
    "secp384r1": ("ecdsa-p384", hashes.SHA384),
}

PublicKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


class SignatureFailure(Exception):
    def __init__(self, found: Issue) -> None:
        super().__init__(found.message)
        self.issue = found


def _fail(code: str, **params: Any) -> SignatureFailure:
    return SignatureFailure(issue(code, **params))


@dataclass(frozen=True)
class TrustedKey:
    """A tenant's registered public key; key_id is what the report names as the signer."""

    key_id: str
    public_key_pem: bytes


@dataclass(frozen=True)
class SignatureResult:
    format: str  # "model-signing" or "detached"
    key_id: str


def load_public_key(pem: bytes | str) -> PublicKey:
    """Parse a supported PEM public key, or raise SignatureFailure(signature.key_invalid)."""
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise _fail("signature.key_invalid", reason=f"not a PEM public key: {exc}") from None
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in EC_CURVES:
        return key
    raise _fail("signature.key_invalid", reason=f"unsupported key type {type(key).__name__}")


def key_algorithm_name(key: PublicKey) -> str:
    """How a supported key's algorithm is shown: ed25519, ecdsa-p256, ecdsa-p384."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ed25519"
    return EC_CURVES[key.curve.name][0]


def key_fingerprint(pem: bytes | str) -> str:
    """sha256 of the key's DER SubjectPublicKeyInfo: a stable id for a registered key (the only
    definition; tenants.services.signing_keys uses it too)."""
    der = load_public_key(pem).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def model_signing_hint(key: PublicKey) -> str:
    """What model-signing records as verificationMaterial.publicKey.hint: sha256 of the PEM."""
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(pem).hexdigest()


def verify_signature(
    signature: bytes, files: Sequence[FileDigest], trusted_keys: Sequence[TrustedKey]
) -> SignatureResult:
    """Verify `signature` over `files` with one of `trusted_keys`; raise SignatureFailure."""
    if len(signature) > MAX_SIGNATURE_BYTES:
        raise _fail("signature.malformed", reason=f"larger than {MAX_SIGNATURE_BYTES} bytes")
    keys: list[tuple[str, PublicKey]] = []
    for trusted in trusted_keys:
        try:
            keys.append((trusted.key_id, load_public_key(trusted.public_key_pem)))
        except SignatureFailure:
            continue  # registration validates keys; a bad stored one simply trusts nothing
    if not keys:
        raise _fail("signature.no_trusted_keys")
    bundle = _as_bundle(signature)
    if bundle is not None:
        return _verify_model_signing(bundle, files, keys)
    return _verify_detached(signature, files, keys)


def _as_bundle(signature: bytes) -> dict[str, Any] | None:
    """The parsed JSON object if the signature is one; a raw signature may start with "{" too."""
    if signature.lstrip()[:1] != b"{":
        return None
    try:
        return _object(loads_strict(signature), "the bundle")
    except StrictJSONError as exc:
        if exc.kind == "not_utf8":
            return None  # binary: a raw signature whose first byte is 0x7b
        raise _fail("signature.malformed", reason=f"bundle JSON: {exc.detail}") from None


def _verify_detached(
    signature: bytes, files: Sequence[FileDigest], keys: list[tuple[str, PublicKey]]
) -> SignatureResult:
    candidates = [signature]
    with contextlib.suppress(binascii.Error, ValueError):  # else a raw binary signature
        candidates.append(base64.b64decode(signature.strip(), validate=True))
    message = canonical_manifest(files)
    for key_id, key in keys:
        for candidate in candidates:
            if _verifies(key, candidate, message):
                return SignatureResult(format="detached", key_id=key_id)
    raise _fail(
        "signature.invalid",
        reason=f"it matches the manifest of the uploaded files under none of the tenant's "
        f"{len(keys)} registered keys: the files changed after signing, or the key is not "
        "registered",
    )


def _verifies(key: PublicKey, signature: bytes, message: bytes) -> bool:
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, message)
        else:
            key.verify(signature, message, ec.ECDSA(EC_CURVES[key.curve.name][1]()))
    except (InvalidSignature, ValueError):
        return False
    return True


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: what a DSSE signature actually signs."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise _fail("signature.malformed", reason=f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _fail("signature.malformed", reason=f"{what} is not valid base64") from None


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail("signature.malformed", reason=f"{what} is not an object")
    return value


def _verify_model_signing(
    bundle: dict[str, Any], files: Sequence[FileDigest], keys: list[tuple[str, PublicKey]]
) -> SignatureResult:
    if bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        raise _fail(
            "signature.unsupported_format", reason=f"bundle mediaType {bundle.get('mediaType')!r}"
        )
    material = _object(bundle.get("verificationMaterial"), "verificationMaterial")
    if "publicKey" not in material:
        # Certificate and keyless (Fulcio/Rekor) bundles need a CA or the network.
        raise _fail(
            "signature.unsupported_format",
            reason="only model-signing's key method is accepted (sign with an EC private key)",
        )
    hint = _object(material["publicKey"], "publicKey").get("hint") or ""
    envelope = _object(bundle.get("dsseEnvelope"), "dsseEnvelope")
    payload = _b64(envelope.get("payload"), "the DSSE payload")
    payload_type = envelope.get("payloadType")
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise _fail("signature.unsupported_format", reason=f"DSSE payloadType {payload_type!r}")
    sigs = envelope.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise _fail("signature.malformed", reason="the DSSE envelope has no signatures")
    raw_sigs = [_b64(_object(s, "a DSSE signature").get("sig"), "a DSSE signature") for s in sigs]
    candidates = [
        (key_id, key)
        for key_id, key in keys
        if isinstance(key, ec.EllipticCurvePublicKey)
        and (not hint or model_signing_hint(key) == hint)
    ]
    if not candidates:
        raise _fail("signature.unknown_key", hint=hint or "none")
    message = pae(IN_TOTO_PAYLOAD_TYPE, payload)
    signer = next(
        (key_id for key_id, key in candidates for raw in raw_sigs if _verifies(key, raw, message)),
        None,
    )
    if signer is None:
        raise _fail(
            "signature.invalid", reason="the DSSE signature does not match the registered key"
        )
    signed = _signed_digests(payload)
    _compare_manifest(signed, files)
    return SignatureResult(format="model-signing", key_id=signer)


def _signed_digests(payload: bytes) -> dict[str, str]:
    """The {file name: sha256} that a verified in-toto statement vouches for."""
    try:
        statement = _object(loads_strict(payload), "the statement")
    except StrictJSONError as exc:
        raise _fail("signature.malformed", reason=f"statement JSON: {exc.detail}") from None
    if statement.get("_type") != IN_TOTO_STATEMENT_TYPE:
        raise _fail(
            "signature.unsupported_format", reason=f"statement _type {statement.get('_type')!r}"
        )
    if statement.get("predicateType") != MODEL_SIGNING_PREDICATE:
        raise _fail(
            "signature.unsupported_format",
            reason=f"predicateType {statement.get('predicateType')!r} (model-signing 1.x writes "
            f"{MODEL_SIGNING_PREDICATE})",
        )
    predicate = _object(statement.get("predicate"), "the predicate")
    serialization_args = _object(predicate.get("serialization"), "the serialization")
    method, hash_type = serialization_args.get("method"), serialization_args.get("hash_type")
    if method != "files" or hash_type != "sha256":
        raise _fail(
            "signature.unsupported_format",
            reason=f"serialization {method!r} with {hash_type!r}; sign whole files with sha256",
        )
    resources = predicate.get("resources")
    subjects = statement.get("subject")
    if not isinstance(resources, list) or not isinstance(subjects, list) or len(subjects) != 1:
        raise _fail("signature.malformed", reason="the statement needs one subject and resources")
    digests: dict[str, str] = {}
    root = hashlib.sha256()
    for resource in resources:
        entry = _object(resource, "a resource")
        name, digest = entry.get("name"), entry.get("digest")
        if (
            entry.get("algorithm") != "sha256"
            or not isinstance(name, str)
            or not isinstance(digest, str)
        ):
            raise _fail("signature.malformed", reason="a resource lacks name, sha256 or digest")
        try:
            root.update(bytes.fromhex(digest))
        except ValueError:
            raise _fail("signature.malformed", reason=f"digest of {name!r} is not hex") from None
        digests[name] = digest.lower()
    subject_digest = _object(
        _object(subjects[0], "the subject").get("digest"), "the subject digest"
    )
    if subject_digest.get("sha256") != root.hexdigest():
        # model-signing's own verifier refuses this too: the statement contradicts itself.
        raise _fail("signature.invalid", reason="the subject digest does not match the resources")
    return digests


def _compare_manifest(signed: dict[str, str], files: Sequence[FileDigest]) -> None:
    uploaded = {f.name: f.sha256 for f in files}
    problems = [
        f"{n} differs from the signed file"
        for n in uploaded
        if n in signed and signed[n] != uploaded[n]
    ]
    problems += [f"{n} was uploaded but not signed" for n in uploaded if n not in signed]
    problems += [f"{n} was signed but not uploaded" for n in signed if n not in uploaded]
    if problems:
        raise _fail("signature.manifest_mismatch", reason="; ".join(sorted(problems)[:5]))

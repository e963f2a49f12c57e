"""Signatures: OpenSSF model-signing bundles (signed by the real library) and detached ones."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import model_signing
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from adapters.validation import TrustedKey, canonical_manifest, key_fingerprint
from tests.validation.builders import (
    CONFIG,
    WEIGHTS,
    good_adapter,
    patch_config,
    poke,
    tensor_key,
    validate,
)

Q_A = tensor_key(0, "q_proj", "A")


def _pem(private_key) -> bytes:
    return private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _trusted(private_key, key_id: str = "ci-key") -> TrustedKey:
    return TrustedKey(key_id=key_id, public_key_pem=_pem(private_key))


def _model_signing_sign(adapter: Path, private_key, tmp_path: Path) -> bytes:
    """Sign `adapter` with model-signing's own signer (the "key" method), return the bundle."""
    key_path = tmp_path / "signing-key.pem"
    key_path.write_bytes(
        private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    signature_path = tmp_path / "model.sig"  # outside the adapter: it is uploaded separately
    model_signing.signing.Config().use_elliptic_key_signer(private_key=key_path).sign(
        adapter, signature_path
    )
    return signature_path.read_bytes()


def _model_signing_verifies(adapter: Path, bundle: bytes, private_key, tmp_path: Path) -> bool:
    """model-signing's own verdict on the same files, to compare ours with."""
    pub, sig = tmp_path / "verify-pub.pem", tmp_path / "verify.sig"
    pub.write_bytes(_pem(private_key))
    sig.write_bytes(bundle)
    try:
        model_signing.verifying.Config().use_elliptic_key_verifier(public_key=pub).verify(
            adapter, sig
        )
    except Exception:
        return False
    return True


def _detached(adapter: Path, private_key) -> bytes:
    report = validate(adapter)
    message = canonical_manifest(report.files)
    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return private_key.sign(message)
    return private_key.sign(message, ec.ECDSA(hashes.SHA256()))


@pytest.fixture
def adapter(tmp_path: Path) -> Path:
    return good_adapter(tmp_path / "adapter")


@pytest.fixture
def p256():
    return ec.generate_private_key(ec.SECP256R1())


# ---- accepted


@pytest.mark.parametrize("curve", [ec.SECP256R1(), ec.SECP384R1()], ids=["P-256", "P-384"])
def test_a_model_signing_bundle_verifies(adapter: Path, tmp_path: Path, curve) -> None:
    key = ec.generate_private_key(curve)
    bundle = _model_signing_sign(adapter, key, tmp_path)
    report = validate(
        adapter, signature=bundle, trusted_keys=[_trusted(key)], require_signature=True
    )
    assert report.valid, report.errors
    assert (report.signature_format, report.signer) == ("model-signing", "ci-key")
    assert _model_signing_verifies(adapter, bundle, key, tmp_path)


def test_the_right_key_is_found_among_several(adapter: Path, tmp_path: Path, p256) -> None:
    others = [_trusted(ec.generate_private_key(ec.SECP256R1()), f"other-{i}") for i in range(3)]
    bundle = _model_signing_sign(adapter, p256, tmp_path)
    report = validate(adapter, signature=bundle, trusted_keys=[*others, _trusted(p256, "mine")])
    assert report.valid and report.signer == "mine"


@pytest.mark.parametrize("kind", ["P-256", "Ed25519"])
@pytest.mark.parametrize("encoding", ["raw", "base64"])
def test_a_detached_signature_over_the_manifest_verifies(
    adapter: Path, kind: str, encoding: str
) -> None:
    key = (
        ec.generate_private_key(ec.SECP256R1())
        if kind == "P-256"
        else ed25519.Ed25519PrivateKey.generate()
    )
    signature = _detached(adapter, key)
    if encoding == "base64":
        signature = base64.b64encode(signature) + b"\n"
    report = validate(
        adapter, signature=signature, trusted_keys=[_trusted(key)], require_signature=True
    )
    assert report.valid, report.errors
    assert report.signature_format == "detached"


def test_an_unsigned_adapter_passes_when_signatures_are_not_required(adapter: Path) -> None:
    report = validate(adapter)
    assert report.valid
    assert {c.name: c.outcome for c in report.checks}["signature.verify"] == "skipped"


# ---- refused


def test_missing_signature_when_required(adapter: Path, p256) -> None:
    report = validate(adapter, trusted_keys=[_trusted(p256)], require_signature=True)
    assert report.error_codes == ["signature.missing"]


def test_model_signing_tampered_weights(adapter: Path, tmp_path: Path, p256) -> None:
    bundle = _model_signing_sign(adapter, p256, tmp_path)
    poke(adapter, Q_A, 0, b"\x00\x00\x80\x3f")  # a finite 1.0: only the signature can notice
    report = validate(adapter, signature=bundle, trusted_keys=[_trusted(p256)])
    assert report.error_codes == ["signature.manifest_mismatch"]
    assert WEIGHTS in report.errors[0].message
    assert not _model_signing_verifies(adapter, bundle, p256, tmp_path)


def test_model_signing_tampered_config(adapter: Path, tmp_path: Path, p256) -> None:
    bundle = _model_signing_sign(adapter, p256, tmp_path)
    patch_config(adapter, lora_alpha=64.0)
    report = validate(adapter, signature=bundle, trusted_keys=[_trusted(p256)])
    assert report.error_codes == ["signature.manifest_mismatch"]


def test_model_signing_signed_a_file_that_was_not_uploaded(
    adapter: Path, tmp_path: Path, p256
) -> None:
    signed_dir = tmp_path / "signed"
    shutil.copytree(adapter, signed_dir)
    (signed_dir / "README.md").write_text("notes")
    bundle = _model_signing_sign(signed_dir, p256, tmp_path)
    report = validate(adapter, signature=bundle, trusted_keys=[_trusted(p256)])
    assert report.error_codes == ["signature.manifest_mismatch"]
    assert "README.md was signed but not uploaded" in report.errors[0].message


def test_model_signing_wrong_key(adapter: Path, tmp_path: Path, p256) -> None:
    bundle = _model_signing_sign(adapter, p256, tmp_path)
    stranger = ec.generate_private_key(ec.SECP256R1())
    report = validate(adapter, signature=bundle, trusted_keys=[_trusted(stranger)])
    assert report.error_codes == ["signature.unknown_key"]


def test_model_signing_forged_payload(adapter: Path, tmp_path: Path, p256) -> None:
    """A statement rewritten to match tampered files keeps the old signature: invalid."""
    bundle = json.loads(_model_signing_sign(adapter, p256, tmp_path))
    poke(adapter, Q_A, 0, b"\x00\x00\x80\x3f")
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    import hashlib

    new = {f.name: f.sha256 for f in validate(adapter).files}
    root = hashlib.sha256()
    for resource in statement["predicate"]["resources"]:
        resource["digest"] = new[resource["name"]]
        root.update(bytes.fromhex(resource["digest"]))
    statement["subject"][0]["digest"]["sha256"] = root.hexdigest()
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    report = validate(adapter, signature=json.dumps(bundle).encode(), trusted_keys=[_trusted(p256)])
    assert report.error_codes == ["signature.invalid"]


def test_model_signing_certificate_bundle_is_unsupported(
    adapter: Path, tmp_path: Path, p256
) -> None:
    bundle = json.loads(_model_signing_sign(adapter, p256, tmp_path))
    bundle["verificationMaterial"] = {"certificate": {"rawBytes": "AAAA"}, "tlogEntries": []}
    report = validate(adapter, signature=json.dumps(bundle).encode(), trusted_keys=[_trusted(p256)])
    assert report.error_codes == ["signature.unsupported_format"]


def test_detached_signature_tampered_file(adapter: Path, p256) -> None:
    signature = _detached(adapter, p256)
    (adapter / CONFIG).write_text(
        (adapter / CONFIG).read_text().replace('"lora_dropout": 0.0', '"lora_dropout": 0.1')
    )
    report = validate(adapter, signature=signature, trusted_keys=[_trusted(p256)])
    assert report.error_codes == ["signature.invalid"]


def test_detached_signature_wrong_key(adapter: Path, p256) -> None:
    signature = _detached(adapter, p256)
    stranger = ed25519.Ed25519PrivateKey.generate()
    report = validate(adapter, signature=signature, trusted_keys=[_trusted(stranger)])
    assert report.error_codes == ["signature.invalid"]


def test_a_signature_but_no_registered_keys(adapter: Path, p256) -> None:
    report = validate(adapter, signature=_detached(adapter, p256), trusted_keys=[])
    assert report.error_codes == ["signature.no_trusted_keys"]


@pytest.mark.parametrize(
    "garbage",
    [
        b"{not json",
        b'{"mediaType": 1}',
        b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}',
    ],
)
def test_garbage_bundles_are_malformed_or_unsupported(adapter: Path, p256, garbage: bytes) -> None:
    report = validate(adapter, signature=garbage, trusted_keys=[_trusted(p256)])
    assert report.error_codes[0] in ("signature.malformed", "signature.unsupported_format")


def test_a_bad_signature_is_never_ignored_even_when_not_required(adapter: Path, p256) -> None:
    report = validate(adapter, signature=b"\x30\x00", trusted_keys=[_trusted(p256)])
    assert report.error_codes == ["signature.invalid"]


def test_key_registration_refuses_unsupported_keys() -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    from adapters.validation import SignatureFailure

    rsa_pem = _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    with pytest.raises(SignatureFailure) as caught:
        key_fingerprint(rsa_pem)
    assert caught.value.issue.code == "signature.key_invalid"
    with pytest.raises(SignatureFailure):
        key_fingerprint(b"-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")
    assert len(key_fingerprint(_pem(ec.generate_private_key(ec.SECP256R1())))) == 64

"""Signed uploads validated by the real Celery worker against the tenant's registered keys."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from adapters.models import AdapterVersion
from adapters.validation.report import FileDigest, canonical_manifest
from tests.adapters.test_validation_task import wait_for_status
from tests.factories import adapter_files, upload

pytestmark = pytest.mark.django_db(transaction=True)
KEYS = "/api/v1/tenants/acme/signing-keys/"


@pytest.fixture
def worker_world(world, settings, celery_worker_process):
    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(celery_worker_process["storage_root"])
    return world


def register(client, name: str, private_key) -> None:
    pem = (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    response = client.post(KEYS, {"name": name, "public_key_pem": pem}, format="json")
    assert response.status_code == 201, response.json()


def detached_signature(directory: Path, private_key) -> bytes:
    """What a publisher's CI does: sign the portal's canonical manifest of the two files."""
    files = []
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        data = (directory / name).read_bytes()
        files.append(FileDigest(name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest()))
    message = canonical_manifest(files)
    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return private_key.sign(message)
    return private_key.sign(message, ec.ECDSA(hashes.SHA256()))


def upload_and_wait(world, directory: Path, signature: bytes | None = None) -> AdapterVersion:
    before = set(AdapterVersion.objects.values_list("pk", flat=True))
    response = upload(world.client("bob"), "acme", "support", directory, signature=signature)
    assert response.status_code == 201, response.json()
    [new] = set(AdapterVersion.objects.values_list("pk", flat=True)) - before
    return wait_for_status(new, {"validated", "rejected"})


def codes(version: AdapterVersion) -> list[str]:
    return [error["code"] for error in version.validation_report["errors"]]


@pytest.fixture
def signing_tenant(worker_world):
    """acme with two registered keys (P-256 'ci', Ed25519 'release') and signatures required."""
    alice = worker_world.client("alice")
    keys = {
        "ci": ec.generate_private_key(ec.SECP256R1()),
        "release": ed25519.Ed25519PrivateKey.generate(),
    }
    for name, key in keys.items():
        register(alice, name, key)
    response = alice.put(
        "/api/v1/tenants/acme/signature-policy/", {"require_signatures": True}, format="json"
    )
    assert response.status_code == 200, response.json()
    return worker_world, keys


def test_an_unsigned_upload_to_a_tenant_requiring_signatures_is_rejected(signing_tenant, tmp_path):
    world, _ = signing_tenant
    version = upload_and_wait(world, adapter_files(tmp_path / "unsigned"))
    assert version.status == "rejected"
    assert codes(version) == ["signature.missing"]
    assert version.signer == ""


@pytest.mark.parametrize("key_name", ["ci", "release"])
def test_a_signed_upload_validates_and_records_its_signer(signing_tenant, tmp_path, key_name):
    world, keys = signing_tenant
    directory = adapter_files(tmp_path / "signed", seed=5)
    version = upload_and_wait(world, directory, detached_signature(directory, keys[key_name]))
    assert version.status == "validated", codes(version)
    assert version.signer == key_name
    assert version.validation_report["signer"] == key_name


def test_a_signature_over_other_files_is_rejected(signing_tenant, tmp_path):
    world, keys = signing_tenant
    signed = adapter_files(tmp_path / "signed", seed=5)
    other = adapter_files(tmp_path / "other", seed=6)
    version = upload_and_wait(world, other, detached_signature(signed, keys["ci"]))
    assert version.status == "rejected" and codes(version) == ["signature.invalid"]


def test_a_revoked_key_no_longer_verifies(signing_tenant, tmp_path):
    world, keys = signing_tenant
    directory = adapter_files(tmp_path / "signed", seed=7)
    signature = detached_signature(directory, keys["ci"])
    assert upload_and_wait(world, directory, signature).status == "validated"

    assert world.client("alice").delete(KEYS + "ci/").status_code == 204
    version = upload_and_wait(world, directory, signature)
    assert version.status == "rejected"
    assert codes(version) == ["signature.invalid"]
    # The other key still works.
    assert (
        upload_and_wait(world, directory, detached_signature(directory, keys["release"])).signer
        == "release"
    )

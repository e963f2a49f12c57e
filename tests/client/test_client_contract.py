"""The client's contract with the portal: the paths it calls are in the OpenAPI schema, and what
`push --sign` signs is byte for byte what the portal verifies."""

from __future__ import annotations

import re

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from drf_spectacular.generators import SchemaGenerator
from lora_portal_client import paths
from lora_portal_client.signing import canonical_manifest, file_digest, sign_directory

from adapters.validation.report import FileDigest
from adapters.validation.report import canonical_manifest as portal_manifest
from adapters.validation.signatures import TrustedKey, verify_signature
from tests.client.steps import write_private_key
from tests.factories import adapter_files


def schema_paths() -> set[str]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {_shape(path) for path in schema["paths"]}


def _shape(path: str) -> str:
    """A path with its parameters' names blanked: a renamed route changes it, a renamed
    placeholder does not."""
    return re.sub(r"\{[^}]+\}", "{}", path)


def missing_from_schema(called: list[str]) -> list[str]:
    known = schema_paths()
    return [path for path in called if _shape(path) not in known]


def test_every_path_the_client_calls_is_in_the_openapi_schema():
    assert missing_from_schema(paths.CORE) == []


def test_a_renamed_route_is_noticed():
    assert missing_from_schema(["/api/v1/tenants/{tenant}/adapterz/{adapter}/"]) != []


def test_the_manifest_it_signs_is_the_portals(tmp_path):
    directory = adapter_files(tmp_path / "a", seed=3)
    ours = [
        file_digest(directory / n) for n in ("adapter_model.safetensors", "adapter_config.json")
    ]
    theirs = [FileDigest(name=d.name, size=d.size, sha256=d.sha256) for d in ours]
    assert canonical_manifest(ours) == portal_manifest(theirs)


@pytest.mark.parametrize(
    "key",
    [
        ed25519.Ed25519PrivateKey.generate(),
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP384R1()),
    ],
    ids=["ed25519", "p256", "p384"],
)
def test_its_signature_verifies_with_the_portals_verifier(tmp_path, key):
    directory = adapter_files(tmp_path / "a", seed=4)
    key_path = tmp_path / "key.pem"
    public_pem = write_private_key(key, key_path)
    signature = sign_directory(directory, key_path)
    files = [
        FileDigest(name=d.name, size=d.size, sha256=d.sha256)
        for d in (
            file_digest(directory / n) for n in ("adapter_config.json", "adapter_model.safetensors")
        )
    ]
    result = verify_signature(
        signature, files, [TrustedKey(key_id="ci", public_key_pem=public_pem)]
    )
    assert result.key_id == "ci"


def test_it_signs_with_the_curves_and_hashes_the_portal_verifies():
    from lora_portal_client.signing import EC_HASHES

    from adapters.validation.signatures import EC_CURVES

    assert {curve: hashing for curve, (_, hashing) in EC_CURVES.items()} == EC_HASHES

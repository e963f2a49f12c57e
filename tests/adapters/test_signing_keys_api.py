"""Signing keys and the signature policy through the API: who may do what, PEM checks, audit."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from core.audit_models import AuditEvent
from portal.audit_verify import verify_chain
from tenants.models import SigningKey

KEYS = "/api/v1/tenants/{}/signing-keys/"
POLICY = "/api/v1/tenants/{}/signature-policy/"


def public_pem(private_key) -> str:
    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def p256_pem() -> str:
    return public_pem(ec.generate_private_key(ec.SECP256R1()))


def add_key(client, name="ci", pem=None, tenant="acme"):
    return client.post(
        KEYS.format(tenant), {"name": name, "public_key_pem": pem or p256_pem()}, format="json"
    )


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


@pytest.mark.parametrize(
    ("make", "algorithm"),
    [
        (lambda: ec.generate_private_key(ec.SECP256R1()), "ecdsa-p256"),
        (lambda: ec.generate_private_key(ec.SECP384R1()), "ecdsa-p384"),
        (ed25519.Ed25519PrivateKey.generate, "ed25519"),
    ],
)
def test_it_registers_supported_public_keys(world, make, algorithm):
    pem = public_pem(make())
    response = add_key(world.client("alice"), pem="\n\n" + pem + "\n")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["algorithm"] == algorithm and body["active"] and body["created_by"] == "alice"
    assert body["public_key_pem"] == pem  # normalised
    key = SigningKey.objects.get(tenant=world.acme, name="ci")
    [event] = events("signing_key.add")
    assert event.after is not None
    assert event.tenant_id == world.acme.pk and event.after["fingerprint"] == body["fingerprint"]
    assert key.created_by == world.users["alice"]
    assert verify_chain().ok


@pytest.mark.parametrize(
    ("pem", "code"),
    [
        ("not a key", "signing_key.invalid_pem"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "signing_key.invalid_pem"),
        (
            public_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
            "signing_key.unsupported_type",
        ),
        (public_pem(ec.generate_private_key(ec.SECP521R1())), "signing_key.unsupported_type"),
        (
            ec.generate_private_key(ec.SECP256R1())
            .private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            .decode(),
            "signing_key.private_key",
        ),
    ],
)
def test_it_refuses_what_is_not_a_supported_public_key(world, pem, code):
    response = add_key(world.client("alice"), pem=pem)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == code
    assert not SigningKey.objects.exists() and not events("signing_key.add")


def test_it_refuses_a_taken_name_and_a_key_registered_twice(world):
    client = world.client("alice")
    pem = p256_pem()
    assert add_key(client, "ci", pem).status_code == 201
    same_name = add_key(client, "ci")
    assert (
        same_name.status_code == 409 and same_name.json()["error"]["code"] == "signing_key.exists"
    )
    same_key = add_key(client, "ci-2", pem)
    assert (
        same_key.status_code == 409 and same_key.json()["error"]["code"] == "signing_key.duplicate"
    )
    assert SigningKey.objects.count() == 1 and len(events("signing_key.add")) == 1


def test_it_lists_keys_to_members_and_only_owners_change_them(world):
    assert add_key(world.client("alice")).status_code == 201
    for who in ("alice", "bob", "vera"):
        listed = world.client(who).get(KEYS.format("acme"))
        assert listed.status_code == 200 and [k["name"] for k in listed.json()["results"]] == ["ci"]
    for who in ("bob", "vera"):
        refused = add_key(world.client(who), "mine")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission.denied"
        refused = world.client(who).delete(KEYS.format("acme") + "ci/")
        assert refused.status_code == 403
    assert SigningKey.objects.get(name="ci").revoked_at is None


def test_it_hides_another_tenants_keys(world):
    assert add_key(world.client("charlie"), "globex-ci", tenant="globex").status_code == 201
    alice = world.client("alice")
    for response in (
        alice.get(KEYS.format("globex")),
        alice.get(KEYS.format("globex") + "globex-ci/"),
        alice.delete(KEYS.format("globex") + "globex-ci/"),
        add_key(alice, tenant="globex"),
        alice.put(POLICY.format("globex"), {"require_signatures": True}, format="json"),
    ):
        assert (
            response.status_code == 404 and response.json()["error"]["code"] == "tenant.not_found"
        )
    # A name of another tenant's key is just unknown here.
    assert alice.get(KEYS.format("acme") + "globex-ci/").status_code == 404
    assert SigningKey.objects.get(name="globex-ci").revoked_at is None
    assert not world.globex.__class__.objects.get(pk=world.globex.pk).require_signatures


def test_revoking_keeps_the_row_and_is_audited_once(world):
    client = world.client("alice")
    fingerprint = add_key(client).json()["fingerprint"]
    assert client.delete(KEYS.format("acme") + "ci/").status_code == 204
    key = SigningKey.objects.get(name="ci")
    assert key.revoked_at is not None
    shown = client.get(KEYS.format("acme") + "ci/").json()
    assert shown["active"] is False and shown["revoked_at"]
    again = client.delete(KEYS.format("acme") + "ci/")
    assert (
        again.status_code == 409 and again.json()["error"]["code"] == "signing_key.already_revoked"
    )
    [event] = events("signing_key.revoke")
    assert event.after is not None
    assert event.after["fingerprint"] == fingerprint and event.actor_id == world.users["alice"].pk
    # Its name stays taken: a report naming the signer keeps meaning one key.
    assert add_key(client, "ci").json()["error"]["code"] == "signing_key.exists"


def test_owners_turn_the_signature_policy_on_and_off(world):
    alice = world.client("alice")
    assert alice.get(POLICY.format("acme")).json() == {
        "require_signatures": False,
        "active_keys": 0,
    }
    no_keys = alice.put(POLICY.format("acme"), {"require_signatures": True}, format="json")
    assert (
        no_keys.status_code == 409 and no_keys.json()["error"]["code"] == "signature_policy.no_keys"
    )
    add_key(alice)
    on = alice.put(POLICY.format("acme"), {"require_signatures": True}, format="json")
    assert on.status_code == 200 and on.json() == {"require_signatures": True, "active_keys": 1}
    world.acme.refresh_from_db()
    assert world.acme.require_signatures
    refused = world.client("bob").put(
        POLICY.format("acme"), {"require_signatures": False}, format="json"
    )
    assert refused.status_code == 403
    assert world.client("vera").get(POLICY.format("acme")).json()["require_signatures"] is True
    off = alice.put(POLICY.format("acme"), {"require_signatures": False}, format="json")
    assert off.status_code == 200 and off.json()["require_signatures"] is False
    changes = [(e.before, e.after) for e in events("tenant.signature_policy")]
    assert changes == [
        ({"require_signatures": False}, {"require_signatures": True}),
        ({"require_signatures": True}, {"require_signatures": False}),
    ]
    # Setting what is already set changes nothing and records nothing.
    assert (
        alice.put(POLICY.format("acme"), {"require_signatures": False}, format="json").status_code
        == 200
    )
    assert len(events("tenant.signature_policy")) == 2


def test_only_an_admin_token_registers_keys(world):
    # Signing keys are the tenant's administration (security class 9): read and write tokens
    # are refused, an admin token is not.
    for scopes in (["read"], ["read", "write"]):
        client = world.token_client("alice", scopes, tenant=world.acme)
        response = add_key(client)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "token.missing_scope"
    assert (
        world.token_client("alice", ["admin"], tenant=world.acme)
        .post(KEYS.format("acme"), {"name": "ci", "public_key_pem": p256_pem()}, format="json")
        .status_code
        == 201
    )

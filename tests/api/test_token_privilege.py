"""Tokens follow least privilege (docs/security.md, class 9): tenant administration needs the
`admin` scope, and a token minted by another token dies with it."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from rest_framework.test import APIClient

from core.audit_models import AuditEvent
from tenants.models import ApiToken, Membership, SigningKey, Tenant
from tests.api.matrix import scopes_lacking

pytestmark = pytest.mark.django_db(transaction=False)

# Every scope but admin: the most a token can hold and still not administer the tenant.
ALL_BUT_ADMIN = scopes_lacking("admin")
PEM = (
    Ed25519PrivateKey.generate()
    .public_key()
    .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    .decode()
)

ADMIN_WRITES = [
    ("post", "/api/v1/tenants/acme/members/", {"username": "nora", "role": "viewer"}),
    ("patch", "/api/v1/tenants/acme/members/bob/", {"role": "owner"}),
    ("delete", "/api/v1/tenants/acme/members/vera/", None),
    (
        "post",
        "/api/v1/tenants/acme/adapters/support/grants/",
        {"username": "nora", "perms": ["upload_version"]},
    ),
    ("delete", "/api/v1/tenants/acme/adapters/support/grants/gus/", None),
    ("post", "/api/v1/tenants/acme/signing-keys/", {"name": "rogue", "public_key_pem": PEM}),
    ("put", "/api/v1/tenants/acme/signature-policy/", {"require_signatures": False}),
]


def _state() -> tuple:
    return (
        sorted(Membership.objects.values_list("user__username", "tenant__slug", "role")),
        SigningKey.objects.count(),
        Tenant.objects.get(slug="acme").require_signatures,
    )


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_WRITES)
def test_it_refuses_tenant_administration_to_a_token_without_the_admin_scope(
    world, method, path, body
):
    client = world.token_client("alice", ALL_BUT_ADMIN, tenant=world.acme)
    before = _state()
    response = getattr(client, method)(path, body, format="json")
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "token.missing_scope"
    assert "'admin' scope" in response.json()["error"]["message"]
    assert _state() == before


def test_it_lets_an_admin_token_administer_the_tenant(world):
    client = world.token_client("alice", ["admin"], tenant=world.acme)
    response = client.post(
        "/api/v1/tenants/acme/members/", {"username": "nora", "role": "viewer"}, format="json"
    )
    assert response.status_code == 201, response.content


def _mint(client: APIClient, scopes: list[str]) -> tuple[APIClient, str]:
    response = client.post("/api/v1/tenants/acme/tokens/", {"scopes": scopes}, format="json")
    assert response.status_code == 201, response.content
    child = APIClient()
    child.credentials(HTTP_AUTHORIZATION=f"Bearer {response.json()['token']}")
    return child, response.json()["prefix"]


def _works(client: APIClient) -> bool:
    return client.get("/api/v1/tenants/acme/adapters/").status_code == 200


def test_it_revokes_every_token_minted_from_a_revoked_token(world):
    parent = world.token_client("alice", ["write"], tenant=world.acme)
    child, child_prefix = _mint(parent, ["write"])
    grandchild, grandchild_prefix = _mint(child, ["read"])
    sibling, _ = _mint(world.client("alice"), ["read"])  # minted by a session: no parent
    assert _works(child) and _works(grandchild)

    response = world.client("alice").delete(
        f"/api/v1/tenants/acme/tokens/{parent.issued.token.prefix}/"
    )
    assert response.status_code == 204, response.content

    assert not _works(parent) and not _works(child) and not _works(grandchild)
    assert child.get("/api/v1/tenants/acme/adapters/").status_code == 401
    assert _works(sibling)
    cascaded = AuditEvent.objects.filter(action="token.revoke", after__cascade_from__isnull=False)
    assert (
        sorted((e.after or {})["cascade_from"] for e in cascaded)
        == [parent.issued.token.prefix] * 2
    )
    revoked = ApiToken.objects.filter(prefix__in=[child_prefix, grandchild_prefix])
    assert all(t.revoked_at is not None for t in revoked) and revoked.count() == 2


def test_revoking_a_minted_token_leaves_the_token_that_minted_it(world):
    parent = world.token_client("alice", ["write"], tenant=world.acme)
    child, child_prefix = _mint(parent, ["read"])
    assert parent.delete(f"/api/v1/tenants/acme/tokens/{child_prefix}/").status_code == 204
    assert not _works(child)
    assert _works(parent)

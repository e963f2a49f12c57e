"""A token cannot reach beyond itself: it mints no broader token and carries no platform powers."""

import pytest

from tenants.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.mark.parametrize("wanted", [["approve"], ["admin"], ["inference"], ["read", "approve"]])
def test_a_token_cannot_mint_a_token_with_scopes_it_lacks(world, wanted):
    client = world.token_client("alice", ["write"], tenant=world.acme)
    before = ApiToken.objects.count()
    response = client.post("/api/v1/tenants/acme/tokens/", {"scopes": wanted}, format="json")
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == "token.missing_scope"
    assert ApiToken.objects.count() == before


@pytest.mark.parametrize("wanted", [["read"], ["write"], ["read", "write"]])
def test_a_token_mints_tokens_within_its_scopes(world, wanted):
    client = world.token_client("alice", ["write"], tenant=world.acme)
    response = client.post("/api/v1/tenants/acme/tokens/", {"scopes": wanted}, format="json")
    assert response.status_code == 201, response.json()
    assert sorted(response.json()["scopes"]) == sorted(wanted)


def test_a_session_mints_any_scope(world):
    response = world.client("alice").post(
        "/api/v1/tenants/acme/tokens/", {"scopes": ["approve", "admin"]}, format="json"
    )
    assert response.status_code == 201, response.json()


def test_a_minted_token_does_not_outlive_the_token_that_minted_it(world):
    client = world.token_client("alice", ["write"], tenant=world.acme, expires_in_days=2)
    before = ApiToken.objects.count()
    response = client.post(
        "/api/v1/tenants/acme/tokens/", {"scopes": ["read"], "expires_in_days": 30}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == "token.bad_expiry"
    assert ApiToken.objects.count() == before
    response = client.post(
        "/api/v1/tenants/acme/tokens/", {"scopes": ["read"], "expires_in_days": 1}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert (
        ApiToken.objects.get(prefix=response.json()["prefix"]).expires_at
        <= client.issued.token.expires_at
    )


@pytest.mark.parametrize("path", ["/api/v1/users/", "/api/v1/engines/", "/api/v1/audit/verify/"])
def test_a_tenant_bound_token_carries_no_platform_powers(world, path):
    world.users["adam"].groups.add(*world.users["olga"].groups.all())
    client = world.token_client("adam", ["read"], tenant=world.acme)
    response = client.get(path)
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == "token.tenant_bound"
    assert world.token_client("adam", ["read"]).get(path).status_code == 200

"""Security classes 9 and 12: who may revoke a token, decided in adapters/access.py.

One's own token: always (a leaked token must be easy to kill). Another member's token: the
tenant's owners, and through a token only with the `admin` scope (members are an admin matter).
"""

import pytest

from adapters.access import AccessContext
from core.audit_models import AuditEvent
from tenants.models import ApiToken
from tenants.services.tokens import token_issue

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def bobs_token(world):
    return token_issue(
        access=AccessContext.for_user(world.users["bob"]), scopes=["read"], tenant=world.acme
    ).token


def _revoke(client, prefix):
    return client.delete(f"/api/v1/tenants/acme/tokens/{prefix}/")


def test_an_owner_with_a_write_token_cannot_revoke_another_members_token(world, bobs_token):
    client = world.token_client("alice", ["write"], tenant=world.acme)
    response = _revoke(client, bobs_token.prefix)
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "token.missing_scope"
    bobs_token.refresh_from_db()
    assert bobs_token.revoked_at is None
    assert not AuditEvent.objects.filter(action="token.revoke").exists()


def test_an_owner_with_an_admin_token_revokes_another_members_token(world, bobs_token):
    client = world.token_client("alice", ["admin"], tenant=world.acme)
    assert _revoke(client, bobs_token.prefix).status_code == 204
    bobs_token.refresh_from_db()
    assert bobs_token.revoked_at is not None
    assert AuditEvent.objects.get(action="token.revoke").actor == world.users["alice"]


def test_a_write_token_revokes_its_owners_own_token(world):
    own = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["read"], tenant=world.acme
    ).token
    client = world.token_client("alice", ["write"], tenant=world.acme)
    assert _revoke(client, own.prefix).status_code == 204
    assert ApiToken.objects.get(pk=own.pk).revoked_at is not None


def test_a_maintainer_does_not_find_another_members_token(world):
    alices = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["read"], tenant=world.acme
    ).token
    response = _revoke(world.client("bob"), alices.prefix)
    assert response.status_code == 404, response.content
    assert ApiToken.objects.get(pk=alices.pk).revoked_at is None


def test_the_service_itself_refuses_without_the_right(world, bobs_token):
    # The check is inside token_revoke, so a page or task that forgot it cannot skip it.
    from core.errors import NotFound

    with pytest.raises(NotFound):
        from tenants.services.tokens import token_revoke

        token_revoke(access=AccessContext.for_user(world.users["vera"]), token=bobs_token)
    bobs_token.refresh_from_db()
    assert bobs_token.revoked_at is None


def test_the_service_refuses_a_token_for_a_tenant_the_caller_does_not_see(world):
    from core.errors import NotFound

    before = ApiToken.objects.count()
    with pytest.raises(NotFound):
        token_issue(
            access=AccessContext.for_user(world.users["nora"]), scopes=["read"], tenant=world.acme
        )
    assert ApiToken.objects.count() == before

"""Signing in through a real OpenID Connect provider (tests/oidc_provider): identities keyed by
issuer and subject, memberships synced from the mapped groups at every sign-in, each audited."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from core.audit_models import AuditEvent
from tenants.models import Membership, MembershipSource, TenantRole
from tenants.sso.models import SsoIdentity, SsoMapping
from tests.sso.flow import sign_in

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def mapped(world, sso):
    acme, globex = world.acme, world.globex
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=acme, role="maintainer"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-leads", tenant=acme, role="owner"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="globex-read", tenant=globex, role="viewer"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="compliance", platform_role="reviewer"
    )
    return world


def test_it_creates_the_user_with_the_mapped_memberships(client, mapped, sso):
    sub = sso.user("dana", groups=["ml-team", "globex-read", "unrelated"])
    response = sign_in(client, "dana")
    assert response.status_code == 302 and response["Location"] == "/"
    identity = SsoIdentity.objects.get(issuer=sso.issuer, subject=sub)
    roles = {
        m.tenant.slug: (m.role, m.source) for m in Membership.objects.filter(user=identity.user)
    }
    assert roles == {"acme": ("maintainer", "sso"), "globex": ("viewer", "sso")}
    assert not identity.user.has_usable_password()
    assert client.get("/").status_code == 200
    actions = list(
        AuditEvent.objects.filter(action__startswith="sso.").values_list("action", flat=True)
    )
    assert (
        actions.count("sso.sync") == 2 and "sso.user_create" in actions and "sso.sign_in" in actions
    )


def test_the_next_sign_in_follows_the_groups_and_leaves_manual_grants(client, mapped, sso):
    sso.user("erin", groups=["ml-team", "compliance"])
    sign_in(client, "erin")
    user = SsoIdentity.objects.get(subject__isnull=False, user__username="erin").user
    assert user.groups.filter(name="reviewer").exists()
    # A grant by hand, which the sync must leave alone.
    Membership.objects.create(user=user, tenant=mapped.globex, role=TenantRole.OWNER)
    sso.user("erin", groups=["ml-leads", "globex-read"])  # globex-read names the manual one
    client.logout()
    sign_in(client, "erin")
    roles = {m.tenant.slug: (m.role, m.source) for m in Membership.objects.filter(user=user)}
    assert roles == {"acme": ("owner", "sso"), "globex": ("owner", MembershipSource.MANUAL)}
    assert not user.groups.filter(name="reviewer").exists()


def test_a_local_user_with_the_same_name_is_not_taken_over(client, mapped, sso):
    sso.user("alice", groups=["ml-team"], email="alice@example.test")
    User.objects.filter(username="alice").update(email="alice@example.test")
    sign_in(client, "alice")
    identity = SsoIdentity.objects.get(issuer=sso.issuer)
    assert identity.user.username == "alice-2"
    assert not Membership.objects.filter(user__username="alice", source="sso").exists()


def test_four_eyes_hold_across_a_persons_accounts(client, mapped, sso):
    """A reviewer who uploaded through another account of theirs (a local one with the e-mail
    their provider verified) may not approve that upload; another reviewer may."""
    from adapters.access import AccessContext
    from core.errors import PermissionDenied

    sso.user("rita-sso", groups=["compliance", "ml-team"], email="rita@example.test")
    sign_in(client, "rita-sso")
    rita_sso = User.objects.get(username="rita-sso")
    User.objects.filter(username="bob").update(email="Rita@Example.test")  # her local account

    class Upload:
        uploaded_by_id = User.objects.get(username="bob").pk

    with pytest.raises(PermissionDenied) as refused:
        AccessContext.for_user(rita_sso).require_review(Upload, "approve")
    assert refused.value.code == "approval.four_eyes"
    AccessContext.for_user(mapped.users["rita"]).require_review(Upload, "approve")

"""Removal takes effect: the session is re-checked against the provider when its ID token
expires, the provider's back-channel logout ends it, and API tokens of a person the mapping
removed stop working at once."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from core.audit_models import AuditEvent
from tenants.models import ApiToken, Membership
from tenants.services.tokens import token_authenticate
from tenants.sso import oidc
from tenants.sso.models import SsoIdentity, SsoMapping
from tenants.sso.sealing import unseal
from tenants.tasks import recheck_sso_token_holders
from tests.sso.flow import sign_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def mapped(world, sso):
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=world.acme, role="maintainer"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="globex", tenant=world.globex, role="viewer"
    )
    return world


def _id_token_expires(client) -> None:
    """The moment the session's ID token expires (rather than waiting for it)."""
    session = client.session
    session[oidc.SESSION_RECHECK_AT] = 0.0
    session.save()


def _token(client, tenant: str) -> str:
    """A token the signed-in person makes for themselves (as on the tokens page)."""
    made = client.post(
        f"/api/v1/tenants/{tenant}/tokens/", {"scopes": ["read"]}, content_type="application/json"
    )
    assert made.status_code == 201, made.json()
    return made.json()["token"]


def test_a_re_check_follows_the_groups_and_the_session_goes_on(client, mapped, sso):
    sso.user("gil", groups=["ml-team", "globex"])
    sign_in(client, "gil")
    sso.user("gil", groups=["ml-team"])
    _id_token_expires(client)
    assert client.get("/").status_code == 200
    assert {m.tenant.slug for m in Membership.objects.filter(user__username="gil")} == {"acme"}
    assert client.session[oidc.SESSION_RECHECK_AT] > 0
    token = _token(client, "acme")
    recheck_sso_token_holders()  # with the grant the session's re-check rotated, and back again
    assert token_authenticate(token) is not None
    _id_token_expires(client)
    assert client.get("/").status_code == 200
    recheck_sso_token_holders()
    assert token_authenticate(token) is not None


def test_a_person_disabled_at_the_provider_loses_everything_at_the_re_check(client, mapped, sso):
    sso.user("hal", groups=["ml-team"])
    sign_in(client, "hal")
    token = _token(client, "acme")
    sso.user("hal", groups=["ml-team"], active=False)
    _id_token_expires(client)
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert client.get("/").status_code == 302  # signed out
    assert not Membership.objects.filter(user__username="hal").exists()
    assert token_authenticate(token) is None
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"sso.access_withdrawn", "sso.session_ended", "token.revoke"} <= actions


def test_a_group_removed_at_the_provider_revokes_the_tokens_of_that_tenant(client, mapped, sso):
    sso.user("ivy", groups=["ml-team", "globex"])
    sign_in(client, "ivy")
    acme_token, globex_token = _token(client, "acme"), _token(client, "globex")
    sso.user("ivy", groups=["globex"])
    client.logout()
    sign_in(client, "ivy")
    assert token_authenticate(acme_token) is None
    assert token_authenticate(globex_token) is not None
    answer = client.get("/api/v1/tenants/acme/", HTTP_AUTHORIZATION=f"Bearer {acme_token}")
    assert answer.status_code == 401
    assert ApiToken.objects.get(prefix=acme_token.split("_")[1]).revoked_at is not None


def test_back_channel_logout_ends_the_session_and_bad_tokens_are_refused(client, mapped, sso):
    provider = Client()  # the provider's own call, without the person's cookies
    sso.user("jo", groups=["ml-team"])
    sign_in(client, "jo")
    url = "/sso/testidp/backchannel-logout/"
    forged = provider.post(url, {"logout_token": sso.logout_token("jo", forge=True)})
    assert forged.status_code == 400 and forged.json()["error"] == "sso.bad_signature"
    assert client.get("/").status_code == 200
    logout_token = sso.logout_token("jo")
    assert provider.post(url, {"logout_token": logout_token}).status_code == 200
    replayed = provider.post(url, {"logout_token": logout_token})
    assert replayed.status_code == 400 and replayed.json()["error"] == "sso.replayed"
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert Membership.objects.filter(user__username="jo").exists()  # logged out, not removed


def test_a_session_of_a_provider_no_longer_configured_ends(client, mapped, sso, settings):
    sso.user("kit", groups=["ml-team"])
    sign_in(client, "kit")
    settings.OIDC_PROVIDERS = []
    _id_token_expires(client)
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert Membership.objects.filter(user__username="kit").exists()  # ended, nothing withdrawn


def test_a_person_disabled_at_the_provider_loses_api_tokens_at_the_scheduled_re_check(
    client, mapped, sso
):
    """Without a browser coming back: beat's task asks the provider with the kept refresh
    token (sealed at rest, never in plain text)."""
    sso.user("lev", groups=["ml-team"])
    sign_in(client, "lev")
    token = _token(client, "acme")
    identity = SsoIdentity.objects.get(user__username="lev")
    kept = unseal(identity.refresh_token_sealed)
    assert kept and kept not in identity.refresh_token_sealed
    assert kept not in json.dumps(dict(client.session))  # the session keeps no copy
    client.logout()
    recheck_sso_token_holders()  # the provider still vouches: nothing changes, token rotated
    rotated = unseal(SsoIdentity.objects.get(pk=identity.pk).refresh_token_sealed)
    assert rotated not in ("", kept)
    recheck_sso_token_holders()  # with the rotated one (the provider revoked the first)
    assert token_authenticate(token) is not None
    sso.user("lev", groups=["ml-team"], active=False)
    recheck_sso_token_holders()
    answer = Client().get("/api/v1/tenants/acme/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 401
    assert token_authenticate(token) is None
    assert not Membership.objects.filter(user__username="lev").exists()
    assert AuditEvent.objects.filter(action="sso.access_withdrawn").exists()
    assert not AuditEvent.objects.filter(after__icontains=kept).exists()


def test_a_group_removed_at_the_provider_revokes_that_tenants_token_at_the_re_check(
    client, mapped, sso
):
    sso.user("mo", groups=["ml-team", "globex"])
    sign_in(client, "mo")
    acme_token, globex_token = _token(client, "acme"), _token(client, "globex")
    client.logout()
    sso.user("mo", groups=["globex"])
    recheck_sso_token_holders()
    assert token_authenticate(acme_token) is None
    assert token_authenticate(globex_token) is not None


def test_tokens_of_an_identity_without_a_refresh_token_end_with_its_id_token(
    client, mapped, sso, settings
):
    sso.user("nia", groups=["ml-team"])
    sign_in(client, "nia")
    token = _token(client, "acme")
    SsoIdentity.objects.filter(user__username="nia").update(refresh_token_sealed="")
    recheck_sso_token_holders()
    assert token_authenticate(token) is not None  # its ID token is still good
    SsoIdentity.objects.filter(user__username="nia").update(
        id_token_expires_at=timezone.now() - timedelta(seconds=settings.SSO_RECHECK_SECONDS + 1)
    )
    recheck_sso_token_holders()
    assert token_authenticate(token) is None

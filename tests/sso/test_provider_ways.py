"""Standard providers that differ from the test provider's defaults, each a switch of the real
provider process (tests/oidc_provider/switches.py): ID tokens without `kid`, client secrets
taken in the Basic header only, refreshes without an ID token. And a provider that refuses the
portal's own client: the portal's mistake, which takes nothing from anybody."""

from __future__ import annotations

import email

import jwt
import pytest
from django.core.cache import cache
from django.test import Client

from core.audit_models import AuditEvent
from tenants.models import Membership
from tenants.services.tokens import token_authenticate
from tenants.sso import oidc
from tenants.sso.models import SsoIdentity, SsoMapping
from tenants.tasks import recheck_sso_token_holders
from tests.fixtures.oidc_provider import CLIENT_SECRET_ENV
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


def _signed_in(client, response, username: str) -> None:
    assert response.status_code == 302, getattr(response, "context", {}) and response.context.get(
        "code"
    )
    assert client.get("/").wsgi_request.user.username == username


def _token(client, tenant: str) -> str:
    made = client.post(
        f"/api/v1/tenants/{tenant}/tokens/", {"scopes": ["read"]}, content_type="application/json"
    )
    assert made.status_code == 201, made.json()
    return made.json()["token"]


def _tenants(username: str) -> set[str]:
    return {m.tenant.slug for m in Membership.objects.filter(user__username=username)}


def _id_token_expires(client) -> None:
    session = client.session
    session[oidc.SESSION_RECHECK_AT] = 0.0
    session.save()


def test_a_provider_that_signs_without_a_kid_is_accepted(client, mapped, sso):
    """OpenID Connect Core 10.1: a provider with one key may leave `kid` out; its JWKS has
    exactly that one key, which checks the token. Its back-channel logout tokens too."""
    sso.switch(no_kid=True)
    sso.user("nik", groups=["ml-team"])
    _signed_in(client, sign_in(client, "nik"), "nik")
    assert SsoIdentity.objects.filter(user__username="nik").exists()
    logout_token = sso.logout_token("nik")
    assert "kid" not in jwt.get_unverified_header(logout_token)
    provider = Client()
    answer = provider.post("/sso/testidp/backchannel-logout/", {"logout_token": logout_token})
    assert answer.status_code == 200
    assert client.get("/").status_code == 302  # ended by the logout


def test_a_provider_that_takes_the_secret_in_the_basic_header_only(client, mapped, sso):
    """Its discovery offers client_secret_basic alone, and it answers a secret in the form body
    with invalid_client: sign-in, the session's re-check and the scheduled one all ask it the
    way it offers, and nobody loses anything."""
    sso.switch(basic_only=True)
    sso.user("bas", groups=["ml-team", "globex"])
    _signed_in(client, sign_in(client, "bas"), "bas")
    token = _token(client, "acme")
    refreshes = sso.counts()["refresh"]
    _id_token_expires(client)
    assert client.get("/").status_code == 200  # the session's re-check
    recheck_sso_token_holders()  # and beat's
    assert sso.counts()["refresh"] == refreshes + 2
    assert token_authenticate(token) is not None
    assert _tenants("bas") == {"acme", "globex"}
    assert not AuditEvent.objects.filter(action="sso.access_withdrawn").exists()


def test_a_refusal_of_the_portals_client_withdraws_nothing_and_alerts_the_admins(
    client,
    mapped,
    sso,
    monkeypatch,
    smtp_server,
    eager_tasks,
    world,
    django_capture_on_commit_callbacks,
):
    """The client's secret is wrong (rotated at the provider, or mistyped here): the provider
    answers invalid_client. That is the portal's fault: nobody's memberships or tokens go, the
    platform admins are told (once), and the next re-check asks again and succeeds."""
    cache.delete("sso-alert:misconfigured:testidp")
    world.users["adam"].email = "adam@platform.test"
    world.users["adam"].save()
    sso.user("cal", groups=["ml-team"])
    _signed_in(client, sign_in(client, "cal"), "cal")
    token = _token(client, "acme")
    client.logout()
    monkeypatch.setenv(CLIENT_SECRET_ENV, "not-the-secret")
    with django_capture_on_commit_callbacks(execute=True):
        recheck_sso_token_holders()
        recheck_sso_token_holders()  # retried; told once
    assert token_authenticate(token) is not None
    assert _tenants("cal") == {"acme"}
    assert not AuditEvent.objects.filter(action="sso.access_withdrawn").exists()
    alert = AuditEvent.objects.get(action="sso.provider_misconfigured")
    assert "invalid_client" in (alert.after or {})["detail"]
    assert [m.recipients for m in smtp_server.mails] == [["adam@platform.test"]]
    mail = email.message_from_bytes(smtp_server.mails[0].content)
    assert "testidp" in mail["Subject"]
    monkeypatch.setenv(CLIENT_SECRET_ENV, sso.client_secret)
    sso.user("cal", groups=[])  # the provider now says cal has no group: the retry hears it
    recheck_sso_token_holders()
    assert token_authenticate(token) is None
    assert _tenants("cal") == set()


def test_only_the_persons_refusal_withdraws(client, mapped, sso):
    """invalid_grant (the person disabled at the provider) still takes everything back."""
    sso.user("dex", groups=["ml-team"])
    sign_in(client, "dex")
    token = _token(client, "acme")
    client.logout()
    sso.user("dex", groups=["ml-team"], active=False)
    recheck_sso_token_holders()
    assert token_authenticate(token) is None
    assert AuditEvent.objects.filter(action="sso.access_withdrawn").exists()
    assert not AuditEvent.objects.filter(action="sso.provider_misconfigured").exists()


def test_a_refresh_without_an_id_token_keeps_the_session_with_the_userinfo_claims(
    client, mapped, sso
):
    """OpenID Connect Core 12.2: a refresh may answer without an ID token. The session goes on,
    synced from the userinfo endpoint's claims (asked with the new access token)."""
    sso.switch(refresh_without_id_token=True)
    sso.user("rho", groups=["ml-team", "globex"])
    _signed_in(client, sign_in(client, "rho"), "rho")
    token = _token(client, "acme")
    sso.user("rho", groups=["ml-team"])
    _id_token_expires(client)
    after = client.get("/")
    assert after.status_code == 200 and after.wsgi_request.user.username == "rho"
    assert _tenants("rho") == {"acme"}
    assert client.session[oidc.SESSION_RECHECK_AT] > 0
    recheck_sso_token_holders()
    assert token_authenticate(token) is not None
    sso.user("rho", groups=["globex"])
    recheck_sso_token_holders()
    assert token_authenticate(token) is None  # acme's token, acme gone from the claims
    assert _tenants("rho") == {"globex"}

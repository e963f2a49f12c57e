"""Each bad answer from a provider is refused with a clear page, creates nothing, and is audited.

The tokens come from the real provider: it is asked to get one thing wrong in the next ID token
it signs (tests/oidc_provider/validator.py), or to sign it with a key it never published.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model

from core.audit_models import AuditEvent
from tenants.sso.models import SsoIdentity, SsoMapping
from tests.sso.flow import authorize_at_provider, callback_path, sign_in, start

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def mapped(world, sso):
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=world.acme, role="viewer"
    )
    sso.user("mallory", groups=["ml-team"])
    return world


def _assert_refused(response, code: str, status: int = 400) -> None:
    assert response.status_code == status
    assert response.context["code"] == code
    assert b"Sign-in refused" in response.content
    assert not SsoIdentity.objects.exists()
    assert not User.objects.filter(username__startswith="mallory").exists()
    refused = AuditEvent.objects.filter(action="sso.refused").order_by("-id").first()
    assert refused is not None and (refused.after or {})["code"] == code


@pytest.mark.parametrize(
    ("how", "code"),
    [
        ("foreign-key", "sso.bad_signature"),
        ("audience", "sso.wrong_audience"),
        ("expired", "sso.token_expired"),
        ("issuer", "sso.unknown_issuer"),
    ],
)
def test_a_bad_id_token_is_refused(client, mapped, sso, how, code):
    sso.tamper_next_id_token(how)
    _assert_refused(sign_in(client, "mallory"), code)


def test_an_id_token_of_another_sign_in_is_refused(client, mapped, sso):
    with httpx.Client() as idp:
        earlier = start(client)
        nonce = parse_qs(urlsplit(earlier).query)["nonce"][0]
        sso.tamper_next_id_token(f"nonce:{nonce}")  # the earlier sign-in's nonce, replayed
        back = authorize_at_provider(start(client), "mallory", idp)
    _assert_refused(client.get(callback_path(back)), "sso.nonce_mismatch")


def test_a_mismatched_state_is_refused(client, mapped, sso):
    with httpx.Client() as idp:
        back = authorize_at_provider(start(client), "mallory", idp)
    forged = back.replace("state=", "state=x")
    _assert_refused(client.get(callback_path(forged)), "sso.bad_state")


def test_a_callback_replayed_is_refused(client, mapped, sso):
    with httpx.Client() as idp:
        back = authorize_at_provider(start(client), "mallory", idp)
    assert client.get(callback_path(back)).status_code == 302
    client.logout()
    replayed = client.get(callback_path(back))
    assert replayed.status_code == 400 and replayed.context["code"] == "sso.bad_state"


def test_claims_that_map_nowhere_are_refused(client, mapped, sso):
    sso.user("mallory", groups=["kitchen-staff"])
    _assert_refused(sign_in(client, "mallory"), "sso.maps_nowhere", status=403)

"""The tokens page: a user's own tokens, created with the plaintext shown once, revoked."""

import pytest
from django.urls import reverse

from adapters.access import AccessContext
from core.audit_models import AuditEvent
from tenants.models import ApiToken
from tenants.services.tokens import token_authenticate, token_issue

pytestmark = pytest.mark.django_db


def _create(client, **data):
    return client.post(
        reverse("tokens"), {"scopes": ["read", "write"], "expires_in_days": "30", **data}
    )


def test_it_creates_a_token_and_shows_the_plaintext_once(pages):
    client = pages.client("bob")
    response = _create(client, name="deploy", tenant="acme")
    assert response.status_code == 200
    token = ApiToken.objects.get(user=pages.world.users["bob"], name="deploy")
    assert token.tenant == pages.world.acme and token.scopes == ["read", "write"]
    plaintext = response.context["issued"].plaintext
    assert plaintext.startswith(f"lp_{token.prefix}_")
    assert response.content.decode().count(plaintext) == 1
    assert response["Cache-Control"] == "no-store"
    assert token_authenticate(plaintext) == token
    assert AuditEvent.objects.filter(action="token.create", object_id=str(token.pk)).exists()
    again = client.get(reverse("tokens")).content.decode()
    assert plaintext not in again and f"lp_{token.prefix}_" in again


def test_it_lists_only_my_tokens(pages):
    theirs = token_issue(
        access=AccessContext.for_user(pages.world.users["charlie"]),
        scopes=["read"],
        name="charlies",
    )
    page = pages.client("alice").get(reverse("tokens")).content.decode()
    assert pages.token.token.prefix in page
    assert theirs.token.prefix not in page


def test_a_token_without_scopes_is_refused_with_its_code(pages):
    response = pages.client("bob").post(
        reverse("tokens"), {"name": "none", "expires_in_days": "30"}
    )
    assert response.status_code == 400
    assert b"token.scopes_required" in response.content
    assert not ApiToken.objects.filter(name="none").exists()


def test_a_bad_expiry_is_refused(pages):
    for bad in ("0", "9999", "soon"):
        response = _create(pages.client("bob"), name="x", expires_in_days=bad)
        assert response.status_code == 400
        assert b"token.bad_expiry" in response.content
    assert not ApiToken.objects.filter(name="x").exists()


def test_binding_to_another_tenant_is_not_found(pages):
    response = _create(pages.client("charlie"), name="sneaky", tenant="acme")
    assert response.status_code == 404
    assert b"tenant.not_found" in response.content
    assert not ApiToken.objects.filter(name="sneaky").exists()


def test_it_revokes_my_token(pages):
    response = pages.client("alice").post(reverse("token-revoke", args=[pages.token.token.pk]))
    assert response.status_code == 302
    pages.token.token.refresh_from_db()
    assert pages.token.token.revoked_at is not None
    assert token_authenticate(pages.token.plaintext) is None


def test_nobody_revokes_someone_elses_token(pages):
    response = pages.client("bob").post(reverse("token-revoke", args=[pages.token.token.pk]))
    assert response.status_code == 404
    pages.token.token.refresh_from_db()
    assert pages.token.token.revoked_at is None


def test_revoking_twice_says_so(pages):
    client = pages.client("alice")
    client.post(reverse("token-revoke", args=[pages.token.token.pk]))
    response = client.post(reverse("token-revoke", args=[pages.token.token.pk]))
    assert response.status_code == 409
    assert b"token.already_revoked" in response.content


def test_a_token_is_given_a_lower_class_on_the_tokens_page_never_a_higher(pages):
    """Service classes (docs/classes.md): acme is silver; bronze is taken, gold refused."""
    token = token_issue(
        access=AccessContext.for_user(pages.world.users["alice"]),
        scopes=["inference"],
        tenant=pages.world.acme,
    ).token
    client = pages.client("alice")
    url = reverse("token-class", args=[token.pk])
    assert 'data-testid="token-class"' in client.get(reverse("tokens")).content.decode()
    refused = client.post(url, {"service_class": "gold"})
    assert refused.status_code == 400
    assert "higher class than its tenant" in refused.content.decode()
    assert ApiToken.objects.get(pk=token.pk).service_class == ""
    assert client.post(url, {"service_class": "bronze"}).status_code == 302
    assert ApiToken.objects.get(pk=token.pk).service_class == "bronze"
    assert AuditEvent.objects.filter(action="token.service_class").count() == 1

"""With local passwords turned off, only the named break-glass admin signs in with a password
(the form and the token endpoint alike); everyone else goes through their provider."""

from __future__ import annotations

import pytest

from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def passwords_off(settings, world, sso):
    settings.SSO_LOCAL_PASSWORDS = False
    settings.SSO_BREAK_GLASS_ADMIN = "adam"
    return world


def test_only_the_break_glass_admin_uses_a_password(client, passwords_off):
    page = client.get("/login/")
    assert (
        b"Sign in with Test IdP" in page.content
        and b"Local passwords are turned off" in page.content
    )
    refused = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 200 and not refused.wsgi_request.user.is_authenticated
    token = client.post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": PASSWORD, "scopes": ["read"]},
        content_type="application/json",
    )
    assert token.status_code == 401
    admin = client.post("/login/", {"username": "adam", "password": PASSWORD})
    assert admin.status_code == 302


def test_passwords_stay_on_by_default(client, world):
    assert client.post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 302

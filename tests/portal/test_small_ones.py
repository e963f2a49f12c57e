"""Security's small ones, as a caller meets them: slugs without "--", the API docs served from
our own static files and only to signed-in users, seed_demo only in debug, and the proxy's
X-Forwarded-Proto trusted only when configured."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.core.management import CommandError, call_command

from adapters.models import Adapter
from tenants.models import Tenant

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("slug", ["acme--support", "a--b", "x---y"])
def test_a_tenant_slug_cannot_hold_a_double_hyphen(world, slug):
    response = world.client("adam").post(
        "/api/v1/tenants/", {"slug": slug, "name": "Spoof"}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert "slug" in response.json()["error"]["message"]
    assert not Tenant.objects.filter(slug=slug).exists()


def test_an_adapter_name_cannot_hold_a_double_hyphen(world):
    response = world.client("alice").post(
        "/api/v1/tenants/acme/adapters/",
        {"name": "support--v1", "base_model": world.base.name},
        format="json",
    )
    assert response.status_code == 400, response.json()
    assert not Adapter.objects.filter(name="support--v1").exists()


def test_single_hyphens_are_still_fine(world):
    response = world.client("adam").post(
        "/api/v1/tenants/", {"slug": "a-b-c", "name": "ABC"}, format="json"
    )
    assert response.status_code == 201, response.json()


def test_the_api_docs_are_for_signed_in_users(client):
    assert client.get("/api/docs/").status_code in (401, 403)
    assert client.get("/api/schema/").status_code in (401, 403)


def test_the_api_docs_load_no_asset_from_another_site(world, client):
    client.force_login(world.users["alice"])
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page)
    assets += re.findall(r"""["']([^"']+\.(?:js|css))["']""", page)
    assert assets
    for asset in assets:
        assert not asset.startswith(("http:", "https:", "//")), asset
    local = [a for a in assets if a.startswith("/static/")]
    assert any("swagger-ui" in a for a in local)
    for asset in local:
        assert finders.find(asset.removeprefix("/static/")), f"{asset} is not shipped"
    assert client.get("/api/schema/").status_code == 200


def test_seed_demo_refuses_outside_debug(settings, tmp_path):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DJANGO_DEBUG"):
        call_command("seed_demo", "--tiny-dir", str(tmp_path))
    assert not Tenant.objects.exists()


def test_a_forged_forwarded_proto_does_not_make_a_request_secure(client, settings):
    assert settings.SECURE_PROXY_SSL_HEADER is None  # not configured by default
    settings.SECURE_SSL_REDIRECT = True
    response = client.get("/login/", HTTP_X_FORWARDED_PROTO="https")
    assert response.status_code == 301
    assert response["Location"].startswith("https://")


def test_a_configured_proxy_header_is_trusted(client, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/login/", HTTP_X_FORWARDED_PROTO="https").status_code == 200


def test_the_proxy_header_setting_is_read_from_the_environment():
    from portal.env import SettingError, env_proxy_ssl_header

    assert env_proxy_ssl_header("H", environ={}) is None
    assert env_proxy_ssl_header("H", environ={"H": "X-Forwarded-Proto: https"}) == (
        "HTTP_X_FORWARDED_PROTO",
        "https",
    )
    with pytest.raises(SettingError):
        env_proxy_ssl_header("H", environ={"H": "https"})

"""`lora-portal login --sso`: a real CLI process signs in at the real provider (the loopback
redirect with PKCE: the test provider's discovery offers no device grant) and saves a portal
token, with the person's mapped memberships synced; an ID token is traded once only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tenants.models import Membership
from tenants.services.tokens import token_authenticate
from tenants.sso.models import SsoMapping
from tests.client.conftest import CLIENT_SRC
from tests.sso.flow import authorize_at_provider

pytestmark = pytest.mark.django_db(transaction=True)
PROMPT = "Sign in at your identity provider: "


def test_login_sso_saves_a_token_of_the_person(live_server, world, sso, tmp_path):
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=world.acme, role="maintainer"
    )
    sso.user("lou", groups=["ml-team"])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LORA_PORTAL_")},
        "LORA_PORTAL_URL": live_server.url,
        "XDG_CONFIG_HOME": str(tmp_path),
        "PYTHONPATH": str(CLIENT_SRC),
    }
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lora_portal_client",
            "login",
            "--sso",
            "--no-browser",
            "--tenant",
            "acme",
            "--scopes",
            "read",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert cli.stderr is not None
        line = ""
        while not line.startswith(PROMPT):
            line = cli.stderr.readline()
            assert line, "the CLI ended before it asked to sign in"
        with httpx.Client() as browser:
            back = authorize_at_provider(line.removeprefix(PROMPT).strip(), "lou", browser)
            assert back.startswith("http://127.0.0.1:")
            assert browser.get(back).status_code == 200
        out, err = cli.communicate(timeout=60)
    finally:
        cli.kill()
    assert cli.returncode == 0, err
    saved = json.loads((tmp_path / "lora-portal" / "config.json").read_text())
    token = token_authenticate(saved["token"])
    assert token is not None and token.user.username == "lou" and token.tenant == world.acme
    assert json.loads(out)["username"] == "lou"
    assert Membership.objects.filter(user=token.user, tenant=world.acme, source="sso").exists()


def test_the_trade_refuses_a_token_the_provider_did_not_sign(client, world, sso):
    answer = client.post(
        "/sso/cli/token/",
        {"provider": "testidp", "id_token": "e30.e30.c2ln", "scopes": ["read"]},
        content_type="application/json",
    )
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "sso.bad_token"
    unknown = client.post(
        "/sso/cli/token/", {"provider": "nowhere", "id_token": "x"}, content_type="application/json"
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "sso.unknown_provider"

"""The unauthenticated edges of single sign-on (the CLI's token trade, back-channel logout) are
cheap to refuse: the provider's keys are fetched once, not per token; an address whose tokens
keep failing is locked out before anything is verified; and a flood is audited with a count,
not a row per token. (The cost under 200 bad tokens a second: bench/sso_flood.py.)"""

from __future__ import annotations

import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.test import Client

from core.audit_models import AuditEvent
from core.login_guard import clear_login_counters
from tenants.sso.guard import forget_lockouts
from tenants.sso.models import SsoMapping
from tests.sso.flow import sign_in

pytestmark = pytest.mark.django_db

ATTACKER = "198.51.100.7"
CLI_TOKEN = "/sso/cli/token/"
LOGOUT = "/sso/testidp/backchannel-logout/"


@pytest.fixture
def attacker():
    clear_login_counters(ATTACKER)
    forget_lockouts()
    yield Client(REMOTE_ADDR=ATTACKER)
    clear_login_counters(ATTACKER)
    forget_lockouts()


def _forged(n: int, issuer: str) -> list[str]:
    """Tokens that look like the provider's, each naming a key id it never published."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    claims = {"iss": issuer, "aud": "lora-portal-cli", "sub": "1", "iat": now, "exp": now + 300}
    return [jwt.encode(claims, key, algorithm="RS256", headers={"kid": f"k{i}"}) for i in range(n)]


def _trade(client: Client, token: str):
    return client.post(
        CLI_TOKEN,
        {"provider": "testidp", "id_token": token, "scopes": ["read"]},
        content_type="application/json",
    )


def test_the_provider_keys_are_fetched_once_for_many_unknown_key_ids(attacker, sso, settings):
    settings.AXES_FAILURE_LIMIT = 1000  # every token verified: the keys' cache alone is tested
    before = sso.counts()["jwks"]
    answers = [_trade(attacker, token) for token in _forged(20, sso.issuer)]
    assert sso.counts()["jwks"] == before + 1  # before: one fetch per token, 10 s each at worst
    assert {(a.status_code, a.json()["error"]["code"]) for a in answers} == {
        (400, "sso.unknown_key")
    }


def test_a_flood_of_bad_tokens_locks_the_address_out_and_is_audited_with_a_count(
    client, attacker, world, sso, settings
):
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=world.acme, role="viewer"
    )
    sso.user("pat", groups=["ml-team"])
    limit = settings.AXES_FAILURE_LIMIT
    answers = [_trade(attacker, token).status_code for token in _forged(limit + 20, sso.issuer)]
    assert answers == [400] * limit + [429] * 20
    locked = _trade(attacker, "e30.e30.c2ln")
    assert locked.json()["error"]["code"] == "auth.locked_out" and locked["Retry-After"]
    logout = attacker.post(LOGOUT, {"logout_token": "e30.e30.c2ln"})
    assert logout.status_code == 429  # one lockout for the address, on every edge
    refused = [e.after or {} for e in AuditEvent.objects.filter(action="sso.refused")]
    assert len(refused) == 2  # the first refusal, and the first refused while locked out
    assert {(after["code"], after["failures"]) for after in refused} == {
        ("sso.unknown_key", 1),
        ("auth.locked_out", 1),
    }
    assert {after["client_ip"] for after in refused} == {ATTACKER}
    # A person at another address signs in meanwhile.
    assert sign_in(client, "pat").status_code == 302


def test_back_channel_logout_floods_are_refused_the_same_way(attacker, sso, settings):
    limit = settings.AXES_FAILURE_LIMIT
    forged = [attacker.post(LOGOUT, {"logout_token": t}) for t in _forged(limit + 5, sso.issuer)]
    assert [a.status_code for a in forged] == [400] * limit + [429] * 5
    assert forged[-1].json()["error"] == "auth.locked_out"
    assert forged[0].json()["error"] == "sso.unknown_key"
    assert AuditEvent.objects.filter(action="sso.refused").count() == 2


def test_the_counts_behind_a_window_reach_the_next_row(attacker, sso, settings):
    """Evidence kept: the refusals a window's row did not write are counted in its successor."""
    settings.AXES_FAILURE_LIMIT = 1000
    settings.LOGIN_FAILED_AUDIT_WINDOW_SECONDS = 1
    tokens = _forged(6, sso.issuer)
    for token in tokens[:5]:
        _trade(attacker, token)
    first = AuditEvent.objects.filter(action="sso.refused").get()
    assert (first.after or {})["failures"] == 1
    deadline = time.monotonic() + 10
    while AuditEvent.objects.filter(action="sso.refused").count() < 2:
        assert time.monotonic() < deadline, "the window never closed"
        _trade(attacker, tokens[5])
    last = AuditEvent.objects.filter(action="sso.refused").order_by("-id").first()
    assert last is not None and (last.after or {})["failures"] >= 5

"""The sign-on's JSON edges answer 400 to a body they cannot read, never a 500: the CLI's
ID-token trade (a body nested 100,000 deep was a RecursionError; a number for `scopes` a
TypeError) and the platform's dry-run page (claims nested 100,000 deep)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db

DEEP = "[" * 100_000 + "]" * 100_000
GOOD = {"provider": "testidp", "id_token": "x", "scopes": ["read"]}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[null, null]", "Send a JSON object"),
        (DEEP.encode(), "Send a JSON object"),
        (b"{nope", "Send a JSON object"),
        (json.dumps({**GOOD, "scopes": 5}).encode(), "scopes: the wrong type"),
        (json.dumps({**GOOD, "scopes": [1]}).encode(), "scopes: the wrong type"),
        (json.dumps({**GOOD, "provider": {"a": 1}}).encode(), "provider: the wrong type"),
        (json.dumps({**GOOD, "tenant": 5, "name": []}).encode(), "name, tenant: the wrong"),
        (json.dumps({**GOOD, "expires_in_days": "9"}).encode(), "expires_in_days: the wrong"),
    ],
)
def test_the_cli_trade_answers_400_to_a_body_it_cannot_read(client, body, says):
    answer = client.post("/sso/cli/token/", body, content_type="application/json")
    assert answer.status_code == 400, answer.content[:200]
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and error["message"].startswith(says)


def test_the_dry_run_page_refuses_claims_nested_too_deep(world):
    page = world.client("adam").post(
        "/platform/sso/dry-run/", {"provider": "testidp", "claims": DEEP}
    )
    assert page.status_code < 500
    assert "The claims are not JSON we take: nested deeper than 32 levels." in page.content.decode()

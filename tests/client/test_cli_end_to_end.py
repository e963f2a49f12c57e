"""The CLI drives a running portal and real engines end to end: push a directory, wait, a
reviewer approves, the owner releases, an alias is promoted, and a chat through the gateway
answers from that alias."""

from __future__ import annotations

import openai
import pytest

from adapters.access import AccessContext
from adapters.models import AdapterVersion
from portal.audit_verify import verify_chain
from tenants.services.tokens import token_issue
from tests.client.steps import released
from tests.gateway.conftest import fleet, worker_fleet  # noqa: F401 - fixtures used here

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


def test_push_review_release_promote_and_chat(worker_fleet, gateway_server, cli, tmp_path):  # noqa: F811
    first = released(cli, tmp_path, seed=401)
    assert cli("alias", "set", "acme/support-bot", "support@1=100").returncode == 0
    second = released(cli, tmp_path, seed=402)
    assert (first, second) == ("acme/support@1", "acme/support@2")
    canary = cli.json("alias", "weights", "acme/support-bot", "support@1=90", "support@2=10")
    assert [t["weight"] for t in canary["targets"]] == [90, 10]
    promoted = cli.json(
        "alias", "promote", "acme/support-bot", "support@2", "--reason", "canary ok"
    )
    assert [(t["version"], t["weight"]) for t in promoted["targets"]] == [("support@2", 100)]

    token = token_issue(
        access=AccessContext.for_user(worker_fleet.world.users["alice"]),
        scopes=["inference"],
        tenant=worker_fleet.world.acme,
    )
    chat = openai.OpenAI(base_url=gateway_server + "/v1", api_key=token.plaintext, max_retries=0)
    reply = chat.chat.completions.with_raw_response.create(
        model="support-bot", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.http_response.status_code == 200
    v2 = AdapterVersion.objects.get(adapter__name="support", number=2)
    assert reply.parse().model == v2.served_name
    status = cli.json("status", second)
    assert [d["kind"] for d in status["decisions"]] == ["approve", "release"]
    assert verify_chain().ok

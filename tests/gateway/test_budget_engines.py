"""Budgets through the gateway on a real engine: 64 concurrent streaming requests with mixed
max_tokens against a tenant budget that holds about a tenth of their worst cases never settle
more than the budget; the refused ones are 429 budget_exceeded before any engine, the admitted
ones carry the x-budget-* headers."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from adapters.access import AccessContext
from budgets.models import Budget, BudgetSpend
from budgets.rebuild import rebuild_counts
from tenants.tokens import token_issue
from tests.faults.record import wait_until

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
LIMIT = 450  # worst cases here are 54 to 82 tokens: 64 of them are about ten times this


def _stream(base_url: str, key: str, model: str, max_tokens: int) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"authorization": f"Bearer {key}"}
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", base_url + "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        out: dict = {"status": r.status_code, "headers": dict(r.headers), "usage": None}
        if r.status_code != 200:
            out["error"] = json.loads(r.read())["error"]
            return out
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    out["usage"] = chunk["usage"]
        return out


def test_concurrent_streams_never_settle_more_than_the_budget(worker_fleet, gateway_server):
    world = worker_fleet.world
    budget = Budget.objects.create(tenant=world.acme, scope="tenant", tokens=LIMIT, window="day")
    rebuild_counts()  # a fresh Redis: the counts are there before the first request
    key = token_issue(
        access=AccessContext.for_user(world.users["alice"]),
        scopes=["inference"],
        tenant=world.acme,
    ).plaintext
    sizes = [4, 8, 16, 32] * 16
    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(lambda n: _stream(gateway_server, key, world.base.name, n), sizes))
    served = [a for a in answers if a["status"] == 200]
    refused = [a for a in answers if a["status"] == 429]
    assert served and refused and len(served) + len(refused) == 64, [
        (a["status"], a.get("error")) for a in answers if a["status"] not in (200, 429)
    ]
    for answer in refused:
        assert (
            answer["error"]["code"] == "budget_exceeded"
            and "'tenant'" in answer["error"]["message"]
        )
        assert int(answer["headers"]["retry-after"]) >= 1
    for answer in served:
        assert answer["headers"]["x-budget-limit"] == str(LIMIT)
        assert int(answer["headers"]["x-budget-remaining"]) >= 0
        assert int(answer["headers"]["x-budget-reset"]) >= 1
    used = sum(a["usage"]["prompt_tokens"] + a["usage"]["completion_tokens"] for a in served)
    assert used <= LIMIT

    def settled() -> bool:
        row = BudgetSpend.objects.filter(budget=budget).first()
        return row is not None and row.tokens == used

    wait_until(settled, timeout=30, what="the gateway persisted the settled spend")

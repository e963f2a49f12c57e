"""Budgets through the gateway on a real engine: 64 concurrent streaming requests with mixed
max_tokens against a tenant budget that holds about a tenth of their worst cases never settle
more than the budget; the refused ones are 429 budget_exceeded before any engine, the admitted
ones carry the x-budget-* headers. A day's window resets at the tenant's midnight, on a gateway
whose clock the test moves."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest

from adapters.access import AccessContext
from budgets import clock
from budgets.models import Budget, BudgetSpend
from budgets.rebuild import rebuild_counts
from tenants.services.tokens import token_issue
from tests.faults.record import wait_until
from tests.fixtures.gateway import running_gateway

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


def _ask(base_url: str, key: str, model: str, max_tokens: int) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
    }
    return httpx.post(
        base_url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=120,
    )


def test_a_day_window_resets_at_the_tenants_midnight_through_a_gateway(
    worker_fleet, celery_worker_process, settings, tmp_path
):
    """The gateway's clock (BUDGET_CLOCK_OFFSET_FILE) starts ten minutes before midnight in Tokyo
    (15:00 UTC: no UTC day ends there); the day's budget is spent until 429 budget_exceeded; the
    clock moved past Tokyo's midnight, the next request is served in the new day's window."""
    world = worker_fleet.world
    world.acme.time_zone = "Asia/Tokyo"  # no summer time: every day there is 86400 s
    world.acme.save()
    tokyo = ZoneInfo("Asia/Tokyo")
    real = time.time()
    midnight = (datetime.fromtimestamp(real, tokyo) + timedelta(days=1)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    clock_file = tmp_path / "budget-clock"
    clock_file.write_text(str(midnight.timestamp() - 600 - real))
    settings.BUDGET_CLOCK_OFFSET_FILE = str(clock_file)  # this process reads the same clock
    limit = 200
    Budget.objects.create(tenant=world.acme, scope="tenant", tokens=limit, window="day")
    rebuild_counts()
    key = token_issue(
        access=AccessContext.for_user(world.users["alice"]),
        scopes=["inference"],
        tenant=world.acme,
    ).plaintext
    with running_gateway(
        celery_worker_process["queue"],
        GATEWAY_REFRESH_SECONDS="0",
        BUDGET_CLOCK_OFFSET_FILE=str(clock_file),
    ) as base:
        served = []
        for _ in range(20):  # each takes some of the 200 tokens: a refusal within a few
            answer = _ask(base, key, world.base.name, 16)
            if answer.status_code != 200:
                break
            served.append(answer)
        assert served and answer.status_code == 429, (answer.status_code, answer.text)
        assert answer.json()["error"]["code"] == "budget_exceeded"
        to_midnight = int(midnight.timestamp() - clock.timestamp()) - 1  # whole seconds
        for headers in (answer.headers, served[-1].headers):
            assert headers["x-budget-limit"] == str(limit)
            assert to_midnight <= int(headers["x-budget-reset"]) <= 600, headers
        assert to_midnight <= int(answer.headers["retry-after"]) <= 600
        assert int(answer.headers["x-budget-remaining"]) < limit

        clock_file.write_text(str(midnight.timestamp() + 5 - real))  # 00:00:05 in Tokyo
        after = _ask(base, key, world.base.name, 16)
        assert after.status_code == 200, after.text
        next_midnight = midnight.timestamp() + 86400
        reset = int(after.headers["x-budget-reset"])
        assert next_midnight - clock.timestamp() - 2 <= reset <= 86400 - 5, after.headers
        assert int(after.headers["x-budget-remaining"]) > int(
            served[-1].headers["x-budget-remaining"]
        )

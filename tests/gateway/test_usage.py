"""Usage for chargeback: Redis totals persisted to DailyUsage (idempotent, never lowered, today and
yesterday only), the beat entry, and the usage API as JSON and CSV for owners and platform admins.

Usage is billing data: a tenant's owners read it (and platform admins, across tenants); its
maintainers and viewers are refused with 403, other tenants get 404.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from gateway.models import DailyUsage
from gateway.usage import LOCK_KEY, usage_key, usage_persist
from tests.gateway.recording import gw_redis, measure, record, version  # noqa: F401
from workers import shared_state

pytestmark = pytest.mark.usefixtures("gw_redis")

NOW = datetime.now(UTC)
TODAY = NOW.date()
YESTERDAY = TODAY - timedelta(days=1)
AT = NOW.timestamp()
AT_YESTERDAY = (NOW - timedelta(days=1)).timestamp()


@pytest.fixture
def usage(world):
    """Today: support@1 x2, support@2 x1, acme's base model x1, globex/legal@1 x1; yesterday:
    support@1 x1. Then persisted once."""
    s1, s2, legal = version(world.support, 1), version(world.support, 2), version(world.legal, 1)
    record(
        measure(s1, at=AT, tokens_in=10, tokens_out=5),
        measure(s1, at=AT, tokens_in=20, tokens_out=6, ok=False),
        measure(s2, at=AT, tokens_in=7, tokens_out=3, service_class="bronze"),
        measure(None, at=AT, tenant=("acme", world.acme.id), tokens_in=4, tokens_out=2),
        measure(legal, at=AT, tokens_in=100, tokens_out=50),
        measure(s1, at=AT_YESTERDAY, tokens_in=1, tokens_out=1),
    )
    report = usage_persist(today=TODAY)
    assert (report.created, report.updated, report.skipped) == (5, 0, 0)
    world.versions = {"s1": s1, "s2": s2, "legal": legal}
    return world


def rows() -> set[tuple]:
    return set(
        DailyUsage.objects.values_list(
            "tenant__slug",
            "version__adapter__name",
            "version__number",
            "day",
            "requests",
            "prompt_tokens",
            "completion_tokens",
        )
    )


EXPECTED = {
    ("acme", "support", 1, TODAY, 2, 30, 11),
    ("acme", "support", 2, TODAY, 1, 7, 3),
    ("acme", None, None, TODAY, 1, 4, 2),
    ("globex", "legal", 1, TODAY, 1, 100, 50),
    ("acme", "support", 1, YESTERDAY, 1, 1, 1),
}


def test_persisting_sets_the_rows_to_the_redis_totals(usage):
    assert rows() == EXPECTED


def test_a_rerun_changes_nothing_and_new_requests_are_not_counted_twice(usage):
    report = usage_persist(today=TODAY)
    assert (report.created, report.updated, report.unchanged) == (0, 0, 5)
    assert rows() == EXPECTED
    record(measure(usage.versions["s2"], at=AT, tokens_in=1, tokens_out=1, service_class="bronze"))
    for _ in range(2):
        usage_persist(today=TODAY)
    assert DailyUsage.objects.count() == 5
    assert ("acme", "support", 2, TODAY, 2, 8, 4) in rows()


def test_usage_carries_the_service_class_its_requests_ran_in(usage):
    """A version's requests in two classes (a batch token lowered to bronze beside the tenant's
    gold callers) are two rows; a field of no class (before classes) is class ''."""
    s2 = usage.versions["s2"]
    record(measure(s2, at=AT, tokens_in=2, tokens_out=2, service_class="gold"))
    usage_persist(today=TODAY)
    by_class = dict(
        DailyUsage.objects.filter(version=s2, day=TODAY).values_list("service_class", "requests")
    )
    assert by_class == {"bronze": 1, "gold": 1}
    shared_state.client().hset(usage_key(TODAY), f"{usage.acme.id}|{s2.id}|requests", 4)
    usage_persist(today=TODAY)
    assert DailyUsage.objects.get(version=s2, day=TODAY, service_class="").requests == 4


def test_only_today_and_yesterday_are_read(usage):
    three_days_ago = (NOW - timedelta(days=3)).timestamp()
    record(measure(usage.versions["s1"], at=three_days_ago))
    usage_persist(today=TODAY)
    assert rows() == EXPECTED
    # A run the next day still completes what was "today" (late flushes after midnight).
    record(measure(usage.versions["s1"], at=AT, tokens_in=0, tokens_out=0))
    usage_persist(today=TODAY + timedelta(days=1))
    assert ("acme", "support", 1, TODAY, 3, 30, 11) in rows()


def test_redis_losing_its_keys_never_lowers_persisted_usage(usage):
    client = shared_state.client()
    client.delete(usage_key(YESTERDAY))
    client.hset(usage_key(TODAY), f"{usage.acme.id}|{usage.versions['s1'].id}|requests", 1)
    usage_persist(today=TODAY)
    assert rows() == EXPECTED


def test_unknown_tenants_and_versions_are_skipped(usage):
    client = shared_state.client()
    s1 = usage.versions["s1"]
    client.hset(
        usage_key(TODAY),
        mapping={
            f"{usage.globex.id}|{s1.id}|requests": 9,  # acme's version under globex
            f"{usage.acme.id}|999999|requests": 9,  # a version that no longer exists
            "999999|0|requests": 9,  # a tenant that no longer exists
            "garbage": 1,
        },
    )
    report = usage_persist(today=TODAY)
    assert report.skipped == 3
    assert rows() == EXPECTED


def test_one_run_at_a_time(usage):
    shared_state.client().set(LOCK_KEY, "other", ex=60)
    record(measure(usage.versions["s2"], at=AT))
    report = usage_persist(today=TODAY)
    assert report.locked and (report.created, report.updated) == (0, 0)
    assert rows() == EXPECTED


def test_the_beat_entry_runs_the_task_every_minute(usage):
    from gateway.tasks import persist_usage
    from portal.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["persist-gateway-usage"]
    assert entry["schedule"] == 60.0
    assert entry["task"] == persist_usage.name and entry["task"] in app.tasks
    record(measure(usage.versions["s2"], at=AT, service_class="bronze"))
    result = persist_usage.apply().get()
    assert result["updated"] == 1 and TODAY.isoformat() in result["days"]
    assert ("acme", "support", 2, TODAY, 2, 17, 8) in rows()


# --- the API ---

TENANT_URL = "/api/v1/tenants/{}/usage/"
PLATFORM_URL = "/api/v1/usage/"
RANGE = {"from": YESTERDAY.isoformat(), "to": TODAY.isoformat()}


def _api_rows(body) -> set[tuple]:
    return {
        (r["tenant"], r["version"], r["day"], r["requests"], r["prompt_tokens"])
        for r in body["rows"]
    }


def test_owners_read_their_tenants_usage_as_json(usage):
    response = usage.client("alice").get(TENANT_URL.format("acme"), RANGE)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["tenant"], body["from"], body["to"]) == ("acme", *RANGE.values())
    assert body["rows"] == [
        {
            "day": YESTERDAY.isoformat(),
            "tenant": "acme",
            "adapter": "support",
            "version": "support@1",
            "service_class": "",
            "requests": 1,
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "shadow_requests": 0,
            "shadow_prompt_tokens": 0,
            "shadow_completion_tokens": 0,
        },
        {
            "day": TODAY.isoformat(),
            "tenant": "acme",
            "adapter": "support",
            "version": "support@1",
            "service_class": "",
            "requests": 2,
            "prompt_tokens": 30,
            "completion_tokens": 11,
            "shadow_requests": 0,
            "shadow_prompt_tokens": 0,
            "shadow_completion_tokens": 0,
        },
        {
            "day": TODAY.isoformat(),
            "tenant": "acme",
            "adapter": "support",
            "version": "support@2",
            "service_class": "bronze",
            "requests": 1,
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "shadow_requests": 0,
            "shadow_prompt_tokens": 0,
            "shadow_completion_tokens": 0,
        },
        {
            "day": TODAY.isoformat(),
            "tenant": "acme",
            "adapter": None,
            "version": None,
            "service_class": "",
            "requests": 1,
            "prompt_tokens": 4,
            "completion_tokens": 2,
            "shadow_requests": 0,
            "shadow_prompt_tokens": 0,
            "shadow_completion_tokens": 0,
        },
    ]


def test_the_range_selects_days(usage):
    body = usage.client("alice").get(TENANT_URL.format("acme"), {"from": TODAY, "to": TODAY})
    assert {r["day"] for r in body.json()["rows"]} == {TODAY.isoformat()}
    default = usage.client("alice").get(TENANT_URL.format("acme")).json()
    assert (
        default["to"] == TODAY.isoformat() and default["from"] == TODAY.replace(day=1).isoformat()
    )


def _csv(response) -> list[dict[str, str]]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.mark.parametrize("how", ["format", "accept"])
def test_the_same_rows_as_csv(usage, how):
    client = usage.client("alice")
    url = TENANT_URL.format("acme")
    if how == "format":
        response = client.get(url, {**RANGE, "format": "csv"})
    else:
        response = client.get(url, RANGE, HTTP_ACCEPT="text/csv")
    json_rows = client.get(url, RANGE).json()["rows"]
    parsed = _csv(response)
    assert list(parsed[0]) == [
        "day",
        "tenant",
        "adapter",
        "version",
        "service_class",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "shadow_requests",
        "shadow_prompt_tokens",
        "shadow_completion_tokens",
    ]
    as_text = [{k: "" if v is None else str(v) for k, v in row.items()} for row in json_rows]
    assert parsed == as_text and len(parsed) == 4
    filename = f"usage-acme-{YESTERDAY}-{TODAY}.csv"
    assert response["Content-Disposition"] == f'attachment; filename="{filename}"'


def test_errors_stay_json_when_csv_is_asked_for(usage):
    response = usage.client("vera").get(TENANT_URL.format("acme"), {"format": "csv"})
    assert response.status_code == 403
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"]["code"] == "permission.denied"


@pytest.mark.parametrize(("who", "status"), [("bob", 403), ("vera", 403), ("rita", 403)])
def test_maintainers_viewers_and_reviewers_are_refused(usage, who, status):
    response = usage.client(who).get(TENANT_URL.format("acme"))
    assert response.status_code == status
    assert response.json()["error"]["code"] == "permission.denied"


@pytest.mark.parametrize("who", ["charlie", "nora", "olga"])
def test_other_tenants_usage_does_not_exist(usage, who):
    response = usage.client(who).get(TENANT_URL.format("acme"), {"format": "csv"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "tenant.not_found"


def test_a_bound_token_reads_only_its_own_tenant(usage):
    client = usage.token_client("charlie", ["read"], tenant=usage.globex)
    assert _api_rows(client.get(TENANT_URL.format("globex"), RANGE).json()) == {
        ("globex", "legal@1", TODAY.isoformat(), 1, 100)
    }
    assert client.get(TENANT_URL.format("acme")).status_code == 404
    assert client.get(PLATFORM_URL).status_code == 403


def test_platform_admins_read_every_tenant_and_can_narrow_to_one(usage):
    client = usage.client("adam")
    everyone = client.get(PLATFORM_URL, RANGE).json()
    assert everyone["tenant"] is None
    assert {r["tenant"] for r in everyone["rows"]} == {"acme", "globex"}
    assert len(everyone["rows"]) == 5
    globex = client.get(PLATFORM_URL, {**RANGE, "tenant": "globex"}).json()
    assert _api_rows(globex) == {("globex", "legal@1", TODAY.isoformat(), 1, 100)}
    assert len(_csv(client.get(PLATFORM_URL, {**RANGE, "format": "csv"}))) == 5
    assert client.get(TENANT_URL.format("globex"), RANGE).status_code == 200
    assert client.get(PLATFORM_URL, {"tenant": "nope"}).status_code == 404


@pytest.mark.parametrize("who", ["alice", "olga", "rita"])
def test_the_cross_tenant_list_is_for_platform_admins(usage, who):
    response = usage.client(who).get(PLATFORM_URL)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission.denied"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"from": "2026-13-01"}, "usage.bad_date"),
        ({"to": "yesterday"}, "usage.bad_date"),
        ({"from": "2026-02-02", "to": "2026-02-01"}, "usage.bad_range"),
        ({"from": "2026-01-01", "to": "2026-04-03"}, "usage.range_too_long"),  # 93 days
        ({"from": "2026-01-01", "to": "2026-04-02"}, None),  # 92 days, both included
    ],
)
def test_bad_ranges_are_refused(usage, params, code):
    response = usage.client("alice").get(TENANT_URL.format("acme"), params)
    if code is None:
        assert response.status_code == 200
        return
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


def test_shadow_pairs_usage_is_persisted_labelled_apart(world):
    """The shadow worker's fields beside the recorder's (evals.services.shadow_pairs): the totals
    hold them, and the shadow columns say how much of the totals they were."""
    s1 = version(world.support, 1)
    record(measure(s1, at=AT, tokens_in=10, tokens_out=5))
    client = shared_state.client()
    owner = f"{world.acme.id}|{s1.id}|shadow_"
    client.hset(
        usage_key(TODAY), mapping={owner + "requests": 1, owner + "in": 10, owner + "out": 5}
    )
    usage_persist(today=TODAY)
    row = DailyUsage.objects.get(version=s1, day=TODAY)
    assert (row.requests, row.prompt_tokens, row.shadow_requests, row.shadow_prompt_tokens) == (
        1,
        10,
        1,
        10,
    )
    assert row.shadow_completion_tokens == 5

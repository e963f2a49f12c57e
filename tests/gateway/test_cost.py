"""The cost view: engine-hours by pool from the prober's up-time record, the dedicated
comparison, each tenant's share by requests, tokens and slot-seconds, the price platform
admins set (audited), and who sees what (adapters/access.py's cost_tenant_reach)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from core.audit_models import AuditEvent
from gateway.models import CostSettings, DailyUsage
from gateway.usage import usage_persist
from tests.factories import make_user
from tests.gateway.recording import engine_row, gw_redis, measure, record, version  # noqa: F401
from workers.models import EngineUptime
from workers.services.engines import engine_record_probe

pytestmark = pytest.mark.django_db
URL = "/api/v1/cost/"
DAY = datetime(2026, 3, 3, tzinfo=UTC).date()
RANGE = {"from": "2026-03-03", "to": "2026-03-03"}


@pytest.fixture
def fleet_day(world):
    """3 March 2026: engine a (shared) up 24 h, b (shared) 6 h, c (gold) 12 h; acme's support@1
    and globex's legal@1 served, the price 2.50 USD per engine-hour."""
    world.users["aude"] = make_user("aude", roles=("auditor",))
    start = datetime(2026, 3, 3, tzinfo=UTC)
    for name, pool, begin, hours in (
        ("a", "shared", start - timedelta(hours=5), 29),  # runs over both ends of the day
        ("b", "shared", start + timedelta(hours=2), 6),
        ("c", "gold", start + timedelta(hours=12), 12),
    ):
        EngineUptime.objects.create(
            engine=engine_row(world, name, pool),
            pool=pool,
            started_at=begin,
            last_seen_at=begin + timedelta(hours=hours),
            closed=True,
        )
    support, legal = version(world.support, 1), version(world.legal, 1)
    for v, tenant, requests, tokens_in, tokens_out, slot_seconds in (
        (support, world.acme, 30, 300, 150, 90.0),
        (legal, world.globex, 10, 100, 50, 30.0),
    ):
        DailyUsage.objects.create(
            tenant=tenant,
            version=v,
            day=DAY,
            requests=requests,
            prompt_tokens=tokens_in,
            completion_tokens=tokens_out,
            slot_seconds=slot_seconds,
        )
    CostSettings.objects.create(pk=1, price_per_engine_hour=Decimal("2.50"), dedicated_slots=8)
    return world


def test_engine_hours_by_pool_cost_and_the_dedicated_comparison(fleet_day):
    body = fleet_day.client("adam").get(URL, RANGE).json()
    assert body["hours"] == 24.0
    assert [(p["pool"], p["engines"], p["engine_hours"], p["cost"]) for p in body["pools"]] == [
        ("gold", 1, 12.0, 30.0),
        ("shared", 2, 30.0, 75.0),
    ]
    assert (body["engine_hours"], body["cost"]) == (42.0, 105.0)
    dedicated = body["dedicated"]
    # Two adapters served: each its own endpoint for the whole day.
    assert (dedicated["adapters"], dedicated["endpoints"], dedicated["engine_hours"]) == (
        2,
        2,
        48.0,
    )
    assert dedicated["cost"] == 120.0 and len(dedicated["assumptions"]) == 4
    assert dedicated["span_hours"] == 24.0  # engine a ran the whole day


def test_both_sides_cover_the_span_the_fleet_ran_not_the_whole_range(fleet_day):
    """Five days asked, the fleet up 29 h of them (a: 2 March 19:00 to 4 March 00:00; b and c
    inside): the dedicated endpoints count those 29 h, not 120."""
    body = fleet_day.client("adam").get(URL, {"from": "2026-03-01", "to": "2026-03-05"}).json()
    assert body["hours"] == 120.0
    assert body["engine_hours"] == 47.0  # a 29 + b 6 + c 12
    dedicated = body["dedicated"]
    assert (dedicated["span_hours"], dedicated["endpoints"], dedicated["engine_hours"]) == (
        29.0,
        2,
        58.0,
    )
    assert (dedicated["span_from"], dedicated["span_to"]) == (
        "2026-03-02T19:00:00+00:00",
        "2026-03-04T00:00:00+00:00",
    )
    assert any(
        "the 29.00 h the shared fleet ran" in a and "of the range's 120.00 h" in a
        for a in dedicated["assumptions"]
    )


def test_a_fleet_that_ran_minutes_is_compared_over_those_minutes(world):
    """The demo's case: engines up ten minutes of a month; both sides count ten minutes."""
    start = datetime(2026, 4, 10, 9, 0, tzinfo=UTC)
    for name in ("m1", "m2"):  # two engines up the same ten minutes: the span is ten minutes
        EngineUptime.objects.create(
            engine=engine_row(world, name, "shared"),
            pool="shared",
            started_at=start,
            last_seen_at=start + timedelta(minutes=10),
            closed=True,
        )
    DailyUsage.objects.create(
        tenant=world.acme, version=version(world.support, 1), day=start.date(), requests=5
    )
    body = world.client("adam").get(URL, {"from": "2026-04-01", "to": "2026-04-30"}).json()
    assert body["engine_hours"] == 0.333
    dedicated = body["dedicated"]
    assert (dedicated["span_hours"], dedicated["endpoints"], dedicated["engine_hours"]) == (
        0.167,
        1,
        0.167,
    )
    page = world.client("adam").get("/platform/cost/", {"from": "2026-04-01", "to": "2026-04-30"})
    assert page.status_code == 200
    assert "0.167 h</strong> the fleet ran (2026-04-10T09:00 to 2026-04-10T09:10 UTC)" in (
        page.content.decode()
    )


def test_each_tenants_share_by_requests_tokens_and_slot_seconds(fleet_day):
    tenants = {t["tenant"]: t for t in fleet_day.client("aude").get(URL, RANGE).json()["tenants"]}
    acme, globex = tenants["acme"], tenants["globex"]
    assert (acme["requests"], acme["tokens"], acme["slot_seconds"]) == (30, 450, 90.0)
    assert (acme["share_requests"], acme["share_tokens"], acme["share_slot_seconds"]) == (
        0.75,
        0.75,
        0.75,
    )
    assert (acme["cost"], globex["cost"]) == (78.75, 26.25)


def test_owners_see_their_tenants_share_only(fleet_day):
    body = fleet_day.client("alice").get(URL, {**RANGE, "tenant": "acme"}).json()
    assert [t["tenant"] for t in body["tenants"]] == ["acme"]
    assert body["pools"] == [] and body["dedicated"] is None


def test_owners_get_no_fraction_of_the_fleets_totals(fleet_day):
    """Own figure / share would be the fleet's total (acme's 30 requests at 0.75: 40): an owner
    gets its own figures and nothing relative to the fleet, in JSON, CSV and on its page."""
    client = fleet_day.client("alice")
    body = client.get(URL, {**RANGE, "tenant": "acme"}).json()
    assert body["scope"] == "tenant"
    (acme,) = body["tenants"]
    assert acme == {
        "tenant": "acme",
        "requests": 30,
        "prompt_tokens": 300,
        "completion_tokens": 150,
        "tokens": 450,
        "slot_seconds": 90.0,
        "cost": 78.75,
    }
    assert (body["engine_hours"], body["cost"]) == (0.0, 0.0)
    csv_body = client.get(URL, {**RANGE, "tenant": "acme", "format": "csv"}).content.decode()
    assert "share" not in csv_body.splitlines()[0]
    (row,) = csv.DictReader(io.StringIO(csv_body))
    assert (row["requests"], row["cost"]) == ("30", "78.75")
    page = client.get("/t/acme/cost/", RANGE).content.decode()
    assert "78.75" in page and "Share of" not in page and "75%" not in page
    # The fleet's readers still see each tenant's share, also for one tenant.
    adam = fleet_day.client("adam").get(URL, {**RANGE, "tenant": "acme"}).json()
    assert adam["scope"] == "fleet" and adam["tenants"][0]["share_requests"] == 0.75
    assert "Share of" in fleet_day.client("aude").get("/platform/cost/", RANGE).content.decode()


@pytest.mark.parametrize(
    ("who", "params", "status"),
    [
        ("alice", {}, 403),  # the fleet's numbers
        ("bob", {"tenant": "acme"}, 403),
        ("vera", {"tenant": "acme"}, 403),
        ("olga", {}, 403),
        ("charlie", {"tenant": "acme"}, 404),
        (None, {}, 401),
    ],
)
def test_who_is_refused(fleet_day, who, params, status):
    response = fleet_day.client(who).get(URL, {**RANGE, **params})
    assert response.status_code == status or (status == 401 and response.status_code == 403)


def test_csv_one_line_per_tenant(fleet_day):
    response = fleet_day.client("adam").get(URL, {**RANGE, "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["tenant"], r["requests"], r["cost"]) for r in rows] == [
        ("acme", "30", "78.75"),
        ("globex", "10", "26.25"),
    ]


def test_platform_admins_set_the_price_audited(fleet_day):
    client = fleet_day.client("adam")
    response = client.put(
        "/api/v1/cost/settings/",
        {"price_per_engine_hour": "3.00", "currency": "eur", "dedicated_slots": 4},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert client.get(URL, RANGE).json()["cost"] == 126.0
    event = AuditEvent.objects.get(action="cost.settings")
    assert event.before is not None
    assert (event.actor_label, event.before["price_per_engine_hour"]) == ("adam", "2.5000")
    assert event.after == {
        "price_per_engine_hour": "3.0000",
        "currency": "EUR",
        "dedicated_slots": 4,
    }


@pytest.mark.parametrize("who", ["alice", "aude", "olga"])
def test_no_one_else_sets_it(fleet_day, who):
    response = fleet_day.client(who).put(
        "/api/v1/cost/settings/", {"price_per_engine_hour": "0"}, format="json"
    )
    assert response.status_code == 403
    assert CostSettings.objects.get().price_per_engine_hour == Decimal("2.5")


@pytest.mark.parametrize(
    "body",
    [
        {"price_per_engine_hour": "-1"},
        {"price_per_engine_hour": "x"},
        {"currency": "euro"},
        {"dedicated_slots": 0},
        {"price_per_engine_hour": "NaN"},
    ],
)
def test_bad_settings_are_refused_and_change_nothing(fleet_day, body):
    response = fleet_day.client("adam").put("/api/v1/cost/settings/", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "cost.bad_settings"
    assert CostSettings.objects.get().price_per_engine_hour == Decimal("2.5")
    assert not AuditEvent.objects.filter(action="cost.settings").exists()


def test_the_prober_records_up_time(world):
    e = engine_row(world, "p", "shared")
    engine_record_probe(engine=e, error="")
    first = EngineUptime.objects.get(engine=e)
    engine_record_probe(engine=e, error="")
    again = EngineUptime.objects.get(engine=e)
    assert again.started_at == first.started_at and again.last_seen_at > first.last_seen_at
    engine_record_probe(engine=e, error="engine.unreachable: refused")
    assert EngineUptime.objects.get(engine=e).closed
    engine_record_probe(engine=e, error="")
    assert EngineUptime.objects.filter(engine=e).count() == 2
    e.pool = "gold"
    e.save()
    engine_record_probe(engine=e, error="")
    assert list(
        EngineUptime.objects.filter(engine=e, closed=False).values_list("pool", flat=True)
    ) == ["gold"]


@pytest.mark.usefixtures("gw_redis")
def test_the_recorder_keeps_each_requests_slot_time(world):
    support = version(world.support, 1)
    now = timezone.now().timestamp()
    record(measure(support, at=now, e2e=1250.5), measure(support, at=now, e2e=749.5))
    usage_persist()
    assert DailyUsage.objects.get(version=support).slot_seconds == 2.0

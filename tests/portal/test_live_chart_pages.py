"""The chart partials on the version page and the dashboard: the first paint's history comes from
the recorder's Redis hashes, the socket paths are the ones the consumers serve, and the fleet's
charts are for operators only."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from adapters.access import AccessContext
from adapters.models import Adapter
from tests.pages.builders import client_for, validated
from tests.portal.live_helpers import publisher
from tests.portal.test_live_metrics import measurement

pytestmark = pytest.mark.django_db


def embedded(html: str, element_id: str):
    found = re.search(
        rf'<script id="{re.escape(element_id)}" type="application/json">(.*?)</script>', html, re.S
    )
    assert found, f"no {element_id} in the page"
    return json.loads(found.group(1))


def record_now(*measurements) -> None:
    async def go():
        pub, redis = publisher()
        from gateway.recorder import Recorder

        recorder = Recorder(redis)
        for m in measurements:
            recorder.add(m)
        await recorder.flush()
        await redis.aclose()

    async_to_sync(go)()


def test_the_version_page_draws_its_history_and_listens_for_more(world, tmp_path):
    # A name no other test run records, since the history is read around "now".
    name = f"probe-{uuid.uuid4().hex[:8]}"
    adapter = Adapter.objects.create(
        tenant=world.acme,
        name=name,
        base_model=world.base,
        created_by=world.users["alice"],
    )
    version = validated(world, "bob", adapter, tmp_path)
    recent = time.time() - 3
    # In the minute before the recent one's (not before now's: in a minute's first 3 seconds both
    # would fall in one minute).
    earlier = (int(recent) // 60 - 1) * 60 + 1.0
    record_now(
        measurement("acme", f"{name}@1", at=earlier, served_from="cold", load_ms=300.0),
        measurement("acme", f"{name}@1", at=recent, served_from="gpu", ttft_ms=14.0),
    )
    url = reverse("version-detail", args=["acme", name, version.number])
    html = client_for(world, "vera").get(url).content.decode()
    assert 'data-live-charts="version"' in html
    assert 'data-socket="/ws/tenants/acme/metrics/"' in html
    assert f'data-select="{name}@1"' in html
    assert 'data-live-events="/ws/tenants/acme/events/"' in html
    history = embedded(html, f"live-{name}@1-history")
    minutes = {p["t"]: p["sums"] for p in history["minutes"]}
    assert minutes[int(earlier) // 60 * 60] == {
        "requests": 1,
        "cold": 1,
        "load_ms_sum": 300,
        "ttft_ms_sum": 10,
        "ttft_count": 1,
    }
    seconds = {p["t"]: p["sums"] for p in history["seconds"]}
    assert seconds[int(recent)] == {"requests": 1, "gpu": 1, "ttft_ms_sum": 14, "ttft_count": 1}
    assert len(history["minutes"]) == 60 and len(history["seconds"]) == 120


def test_the_dashboard_shows_fleet_charts_to_operators_only(world):
    operator = client_for(world, "olga").get(reverse("dashboard")).content.decode()
    assert 'data-live-charts="fleet"' in operator
    assert 'data-socket="/ws/fleet/metrics/"' in operator
    history = embedded(operator, "live-fleet-history")
    assert len(history["minutes"]) == 60
    assert all("evictions" in p["sums"] for p in history["seconds"])
    for who in ("alice", "vera", "charlie"):
        page = client_for(world, who).get(reverse("dashboard")).content.decode()
        assert "data-live-charts" not in page, who


def test_the_tenant_page_adds_up_what_its_user_may_see(world, tmp_path):
    from tenants.services.tenancy import adapter_grant

    names = [f"probe-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        adapter = Adapter.objects.create(
            tenant=world.acme, name=name, base_model=world.base, created_by=world.users["alice"]
        )
        validated(world, "bob", adapter, tmp_path / name)
    adapter_grant(
        access=AccessContext.for_user(world.users["alice"]),
        adapter=Adapter.objects.get(name=names[0]),
        username="nora",
        perms=["view_adapter"],
    )
    now = time.time()
    record_now(
        measurement("acme", f"{names[0]}@1", at=now - 2, served_from="gpu", ttft_ms=10.0),
        measurement("acme", f"{names[1]}@1", at=now - 2, served_from="cold", ttft_ms=30.0),
    )
    url = reverse("tenant-adapters", args=["acme"])

    def last_seconds(who: str) -> dict:
        html = client_for(world, who).get(url).content.decode()
        assert 'data-live-charts="tenant"' in html
        history = embedded(html, "live-acme-history")
        return {p["t"]: p["sums"] for p in history["seconds"]}[int(now - 2)]

    # Other adapters of acme may be recorded by other tests at the same time: compare the parts.
    member, grantee = last_seconds("vera"), last_seconds("nora")
    assert grantee == {"requests": 1, "gpu": 1, "ttft_ms_sum": 10, "ttft_count": 1}
    assert member["requests"] >= 2 and member["cold"] >= 1

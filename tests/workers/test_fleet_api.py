"""The operator API on engines and the version's placement, through the REST API (no engine:
actions write desired state and enqueue a converge pass after commit, which is checked elsewhere)."""

from __future__ import annotations

import pytest

from adapters.models import Adapter
from core.audit_models import AuditEvent
from tests.fixtures.shared_counts import forget_engine
from tests.workers.fleet import servable_version
from workers import engine_slots, shared_state
from workers.models import Engine, Residency

pytestmark = pytest.mark.django_db


@pytest.fixture
def cpu1(world):
    engine = Engine.objects.create(
        name="cpu-1",
        base_model=world.base,
        url="http://127.0.0.1:9",
        served_model_name="t",
        adapter_root="/srv/adapters",
        max_loras=2,
        max_cpu_loras=3,
        max_lora_rank=32,
        state="up",
    )
    forget_engine(engine.name)
    yield engine
    forget_engine(engine.name)


def post(client, engine, verb, version):
    label = f"{version.tenant.slug}/{version.adapter.name}@{version.number}"
    return client.post(f"/api/v1/engines/{engine}/{verb}/", {"version": label}, format="json")


def test_pin_then_a_second_pin_is_refused_with_every_reason(world, cpu1, tmp_path):
    world.acme.quota_pinned_slots = 1
    world.acme.save()
    one = servable_version(world.support, tmp_path, seed=1)
    two = servable_version(world.support, tmp_path, seed=2)
    olga = world.client("olga")

    ok = post(olga, "cpu-1", "pin", one)
    assert ok.status_code == 202, ok.json()
    assert ok.json()["desired_state"] == "pinned"
    assert AuditEvent.objects.filter(action="engine.pin", object_id=f"cpu-1/{one.served_name}")

    refused = post(olga, "cpu-1", "pin", two)
    assert refused.status_code == 409
    error = refused.json()["error"]
    # min(2, 3) - 1 = 1 pin on this engine, and acme may pin one: both rules are named.
    assert error["code"] == "fleet.pin_budget"
    assert {p["code"] for p in error["details"]["problems"]} == {
        "fleet.pin_budget",
        "fleet.pin_quota",
    }
    assert not Residency.objects.filter(version=two).exists()
    assert not AuditEvent.objects.filter(action="engine.pin", object_id__endswith=two.served_name)


def test_evict_is_refused_while_pinned_and_while_requests_are_in_flight(world, cpu1, tmp_path):
    version = servable_version(world.support, tmp_path, seed=3)
    olga = world.client("olga")
    assert post(olga, "cpu-1", "pin", version).status_code == 202
    pinned = post(olga, "cpu-1", "evict", version)
    assert (pinned.status_code, pinned.json()["error"]["code"]) == (409, "fleet.pinned")

    assert post(olga, "cpu-1", "unpin", version).status_code == 202
    assert engine_slots.slot_enter("cpu-1", version.served_name, max_loras=2)
    busy = post(olga, "cpu-1", "evict", version)
    assert (busy.status_code, busy.json()["error"]["code"]) == (409, "fleet.in_flight")
    engine_slots.slot_leave("cpu-1", version.served_name)

    done = post(olga, "cpu-1", "evict", version)
    assert done.status_code == 202 and done.json()["desired_state"] == "absent"


def test_warm_leaves_a_free_cache_slot(world, cpu1, tmp_path):
    olga = world.client("olga")
    adapters = [
        Adapter.objects.create(tenant=world.acme, name=f"w{i}", base_model=world.base)
        for i in range(3)
    ]
    versions = [servable_version(a, tmp_path, seed=10 + i) for i, a in enumerate(adapters)]
    assert post(olga, "cpu-1", "warm", versions[0]).status_code == 202
    assert post(olga, "cpu-1", "warm", versions[1]).status_code == 202
    third = post(olga, "cpu-1", "warm", versions[2])
    assert (third.status_code, third.json()["error"]["code"]) == (409, "fleet.last_free_slot")


def test_a_version_too_large_for_the_engine_is_refused(world, cpu1, tmp_path):
    version = servable_version(world.support, tmp_path, seed=4, rank=64)
    refused = post(world.client("olga"), "cpu-1", "warm", version)
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "fleet.rank_too_large")


def test_unknown_or_malformed_version_names(world, cpu1):
    olga = world.client("olga")
    bad = olga.post("/api/v1/engines/cpu-1/pin/", {"version": "../../etc"}, format="json")
    assert (bad.status_code, bad.json()["error"]["code"]) == (409, "fleet.bad_version")
    missing = olga.post("/api/v1/engines/cpu-1/pin/", {"version": "acme/support@99"}, format="json")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "version.not_found")


def test_residency_shows_tiers_and_the_version_shows_where_it_runs(world, cpu1, tmp_path):
    hot = servable_version(world.support, tmp_path, seed=5)
    Residency.objects.create(
        engine=cpu1, version=hot, desired_state="registered", observed_state="resident_gpu"
    )
    rows = world.client("olga").get("/api/v1/engines/cpu-1/residency/").json()["results"]
    assert [(r["served_name"], r["tier"], r["gpu_tier_source"]) for r in rows] == [
        (hot.served_name, "hot", "inferred")
    ]
    placement = world.client("alice").get(
        f"/api/v1/tenants/acme/adapters/support/versions/{hot.number}/residency/"
    )
    assert placement.status_code == 200
    assert [(p["engine"], p["tier"]) for p in placement.json()] == [("cpu-1", "hot")]
    # Another tenant does not even learn that the version exists.
    assert (
        world.client("charlie")
        .get(f"/api/v1/tenants/acme/adapters/support/versions/{hot.number}/residency/")
        .status_code
        == 404
    )


def test_advice_and_launch_config(world, cpu1, tmp_path):
    version = servable_version(world.support, tmp_path, seed=6, rank=8)
    Residency.objects.create(engine=cpu1, version=version, desired_state="registered")
    olga = world.client("olga")
    advice = olga.get("/api/v1/engines/cpu-1/advice/").json()
    # Every served rank is 8: a limit of 32 wastes LoRA buffer memory.
    assert advice["advised"]["max_lora_rank"] == 8 and advice["changed"] is True
    assert len(advice["reasons"]) == 3
    launch = olga.get("/api/v1/engines/cpu-1/launch-config/").json()
    assert "--enable-lora" in launch["flags"]
    assert launch["lora_modules"] == [
        {
            "name": version.served_name,
            "path": f"/srv/adapters/{version.served_name}",
            "base_model_name": "t",
        }
    ]


def test_a_converge_pass_on_an_engine_that_does_not_answer_skips_quietly(cpu1):
    from workers.controller import converge_engine

    report = converge_engine(cpu1)  # http://127.0.0.1:9: nothing listens there
    assert report.actions == []
    assert [s["code"] for s in report.skipped] == ["engine.unreachable"]


@pytest.mark.parametrize("state", ["up", "down"])
def test_an_engine_that_is_away_is_watched_by_one_follow_up_pass(
    cpu1, state, settings, django_capture_on_commit_callbacks
):
    """A pass that finds the engine away schedules one follow-up pass FLEET_DOWN_PROBE_SECONDS
    later (so recovery starts soon after the engine returns, not at the next reconcile tick);
    more passes meanwhile add no second watch."""
    from unittest import mock

    from workers.controller import converge_engine

    settings.FLEET_DOWN_PROBE_SECONDS = 3.0
    cpu1.state = state
    cpu1.save()
    shared_state.client().delete(f"lp:fleet:watch:{cpu1.name}")
    sent = mock.patch("workers.tasks.converge_engine_task.apply_async")
    with sent as apply_async, django_capture_on_commit_callbacks(execute=True):
        converge_engine(cpu1)
        converge_engine(cpu1)  # a reconcile tick meanwhile: no second chain
    assert apply_async.call_count == 1
    _, kwargs = apply_async.call_args
    assert kwargs["countdown"] == 3.0 and kwargs["queue"] == cpu1.queue
    assert kwargs["kwargs"] == {"engine_id": cpu1.pk}
    # Once the follow-up is due, it may claim the next watch.
    shared_state.client().delete(f"lp:fleet:watch:{cpu1.name}")
    with sent as apply_async, django_capture_on_commit_callbacks(execute=True):
        converge_engine(cpu1)
    assert apply_async.call_count == 1

"""Releases through aliases: promote, rollback and revisions (services and API), a canary's own
concurrency cap, the canary verdict at its boundaries, the automatic rollback fed by the real
gateway recorder, and one 90/10 canary through the real gateway and engines."""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections import Counter
from datetime import UTC, datetime

import openai
import pytest
from django.conf import settings
from openai.types.chat import ChatCompletionMessageParam
from redis import asyncio as aioredis

from adapters.access import AccessContext
from adapters.models import Adapter, AdapterVersion, Alias, AliasRevision, AliasTarget
from adapters.services import releases
from adapters.services.aliases import alias_set
from adapters.services.releases import Guard, MinuteStats, canary_verdict, window_minutes
from core.audit_models import AuditEvent
from core.errors import ApplicationError
from gateway import limits
from gateway import tasks as gateway_tasks
from gateway.errors import GatewayError
from gateway.recorder import Measurement, Recorder
from gateway.routes import Target, build_table
from portal.audit_verify import verify_chain
from tenants.access_port import Access
from tenants.services.tokens import token_issue
from tests.workers.conftest import worker_fleet  # noqa: F401 - the fixture
from workers import shared_state
from workers.redis_contract.keys import conc_key

PROMPT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something about tea."}]


# --- builders ---------------------------------------------------------------------------------


def version(adapter: Adapter, number: int, status: str = "active") -> AdapterVersion:
    digest = hashlib.sha256(f"{adapter.pk}-{number}-{uuid.uuid4()}".encode()).hexdigest()
    return AdapterVersion.objects.create(
        tenant=adapter.tenant,
        adapter=adapter,
        number=number,
        status=status,
        served_name=f"{adapter.tenant.slug}--{adapter.name}--v{number}-{digest[:8]}",
        manifest_sha256=digest,
        rank=8,
    )


@pytest.fixture
def acme(world):
    """support@1..3 active, @4 staged; globex/legal@1 active; alias support-bot -> support@1."""
    for number in (1, 2, 3):
        version(world.support, number)
    version(world.support, 4, status="staged")
    version(world.legal, 1)
    alias_set(
        access=owner(world),
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    return world


def owner(world) -> Access:
    return AccessContext.for_user(world.users["alice"])


def alias_of(world, name: str = "support-bot") -> Alias:
    return Alias.objects.get(tenant=world.acme, name=name)


def targets_of(alias: Alias) -> dict[str, tuple[int, int | None]]:
    return {
        f"{t.version.adapter.name}@{t.version.number}": (t.weight, t.max_concurrent)
        for t in AliasTarget.objects.filter(alias=alias).select_related("version__adapter")
    }


def canary(world, *, stable: str = "support@1", new: str = "support@2", **guard) -> Alias:
    alias_set(
        access=owner(world),
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": stable, "weight": 90}, {"version": new, "weight": 10}],
        guard=guard or None,
    )
    return alias_of(world)


def head_of(alias: Alias) -> AliasRevision:
    return alias.revisions.latest("number")


def parent_number(revision: AliasRevision) -> int | None:
    return revision.parent.number if revision.parent is not None else None


def snapshot(alias: Alias) -> tuple:
    """Everything a refused release could have changed."""
    return (
        targets_of(alias),
        list(alias.revisions.values_list("number", "action", "targets")),
        AuditEvent.objects.count(),
    )


# --- services ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_each_change_of_targets_is_a_revision_and_promote_sets_100_on_one_version(acme):
    alias = canary(acme)
    alias_set(  # the same targets again: audited, but no new revision
        access=owner(acme),
        tenant=acme.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 90}, {"version": "support@2", "weight": 10}],
    )
    revs = list(alias.revisions.order_by("number"))
    assert [(r.number, r.action, r.parent_id) for r in revs] == [
        (1, "set", None),
        (2, "set", revs[0].pk),
    ]
    assert [(t["version"], t["weight"]) for t in revs[1].targets] == [
        ("support@1", 90),
        ("support@2", 10),
    ]

    releases.alias_promote(access=owner(acme), alias=alias, version="support@2", reason="healthy")
    assert targets_of(alias) == {"support@2": (100, None)}
    head = head_of(alias)
    assert (head.number, head.action, parent_number(head), head.actor_label, head.reason) == (
        3,
        "promote",
        2,
        "alice",
        "healthy",
    )
    event = AuditEvent.objects.filter(action="alias.promote").get()
    assert event.before is not None and event.after is not None
    assert event.object_id == "acme/support-bot" and event.actor_label == "alice"
    assert [t["version"] for t in event.before["targets"]] == ["support@1", "support@2"]
    assert event.after["targets"][0]["version"] == "support@2" and event.after["revision"] == 3

    before = snapshot(alias)  # promoting what already has 100% changes and records nothing
    releases.alias_promote(access=owner(acme), alias=alias, version="support@2")
    assert snapshot(alias) == before
    assert verify_chain().ok


@pytest.mark.django_db
def test_rollback_returns_to_the_previous_targets_and_then_further_back(acme):
    alias_set(
        access=owner(acme),
        tenant=acme.acme,
        name="support-bot",
        targets=[{"version": "support@2", "weight": 100}],
    )
    alias = canary(acme, stable="support@2", new="support@3")  # rev 3
    releases.alias_rollback(access=owner(acme), alias=alias, reason="errors on @3")
    assert targets_of(alias) == {"support@2": (100, None)}
    head = head_of(alias)
    assert (head.number, head.action, parent_number(head)) == (4, "rollback", 1)
    event = AuditEvent.objects.filter(action="alias.rollback").get()
    assert event.before is not None and event.after is not None
    assert event.after["restored_revision"] == 2 and event.after["reason"] == "errors on @3"
    assert event.before["revision"] == 3

    # A second rollback does not re-apply the canary just rolled back: it goes one step further.
    releases.alias_rollback(access=owner(acme), alias=alias)
    assert targets_of(alias) == {"support@1": (100, None)}
    before = snapshot(alias)
    with pytest.raises(ApplicationError) as err:
        releases.alias_rollback(access=owner(acme), alias=alias)
    assert (err.value.code, err.value.status) == ("alias.no_previous_revision", 409)
    assert snapshot(alias) == before


@pytest.mark.django_db
def test_rollback_is_refused_when_a_previous_target_no_longer_serves(acme):
    alias = canary(acme)
    AdapterVersion.objects.filter(adapter=acme.support, number=1).update(status="disabled")
    before = snapshot(alias)
    with pytest.raises(ApplicationError) as err:
        releases.alias_rollback(access=owner(acme), alias=alias)
    assert err.value.code == "alias.rollback_version_not_active" and "support@1" in str(err.value)
    assert snapshot(alias) == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("who", "ref", "code"),
    [
        ("alice", "support@4", "alias.version_not_active"),  # staged
        ("alice", "support@9", "alias.unknown_version"),
        ("alice", "legal@1", "alias.unknown_version"),  # another tenant's version
        ("vera", "support@2", "permission.denied"),  # a viewer
        ("charlie", "support@2", "permission.denied"),  # another tenant's owner (API: 404)
    ],
)
def test_refused_promotes_leave_nothing(acme, who, ref, code):
    alias = canary(acme)
    before = snapshot(alias)
    with pytest.raises(ApplicationError) as err:
        releases.alias_promote(
            access=AccessContext.for_user(acme.users[who]), alias=alias, version=ref
        )
    assert err.value.code == code
    assert snapshot(alias) == before


@pytest.mark.django_db
def test_an_alias_older_than_revisions_gets_its_baseline_and_can_be_rolled_back(acme):
    old = Alias.objects.create(tenant=acme.acme, name="legacy")
    AliasTarget.objects.create(alias=old, version=acme.support.versions.get(number=3), weight=100)
    with pytest.raises(ApplicationError) as err:
        releases.alias_rollback(access=owner(acme), alias=old)
    assert err.value.code == "alias.no_previous_revision"
    assert not old.revisions.exists()  # the refusal left no baseline behind
    releases.alias_promote(access=owner(acme), alias=old, version="support@2")
    assert list(old.revisions.order_by("number").values_list("action", "actor_label")) == [
        ("set", "system"),
        ("promote", "alice"),
    ]
    releases.alias_rollback(access=owner(acme), alias=old)
    assert targets_of(old) == {"support@3": (100, None)}


# --- a canary's own concurrency cap -----------------------------------------------------------


@pytest.mark.django_db
def test_a_targets_max_concurrent_reaches_the_gateway_and_the_lower_cap_applies(acme):
    acme.support.max_concurrent_requests = 16
    acme.support.save()
    alias_set(
        access=owner(acme),
        tenant=acme.acme,
        name="support-bot",
        targets=[
            {"version": "support@1", "weight": 90},
            {"version": "support@2", "weight": 10, "max_concurrent": 2},
        ],
    )
    table = build_table(1)
    route = table.route_for(acme.acme.pk, "support-bot")
    assert route is not None
    caps = {t.label: (t.max_concurrent, t.alias_max_concurrent) for t in route.targets}
    assert caps == {"support@1": (16, None), "support@2": (16, 2)}
    assert [limits.concurrency_limit(t) for t in route.targets] == [16, 2]
    # By its own name the version keeps the adapter's cap; a cap above the adapter's is moot.
    by_name = table.route_for(acme.acme.pk, "support@2")
    assert by_name is not None and limits.concurrency_limit(by_name.targets[0]) == 16
    higher = Target(**{**_target_fields(), "max_concurrent": 4, "alias_max_concurrent": 50})
    assert limits.concurrency_limit(higher) == 4


def _target_fields(**overrides) -> dict:
    return {
        "served_name": f"rel-test-{uuid.uuid4().hex[:10]}",
        "version_id": 1,
        "tenant_id": 0,
        "tenant": "acme",
        "adapter": "support",
        "number": 2,
        "pool": "shared",
        "base_model_id": 1,
        "rank": 8,
        "max_concurrent": 16,
        **overrides,
    }


async def test_admission_refuses_the_request_over_the_canarys_own_cap():
    redis = aioredis.Redis.from_url(settings.REDIS_URL)
    scripts = limits.Scripts(redis)
    target = Target(**_target_fields(alias_max_concurrent=2))

    def admission(requested: str = "support-bot") -> limits.Admission:
        # No tenant: no rate limit is read or counted.
        return limits.Admission(
            scripts, limits.Terms(tenant_id=0, rpm_limit=0, target=target, requested=requested)
        )

    try:
        first, second = admission(), admission()
        await first.admit()
        await second.admit()
        third = admission()
        with pytest.raises(GatewayError) as err:
            await third.admit()
        assert err.value.status == 429 and "2 requests running" in err.value.message
        await third.release()  # refused: it holds nothing, so this gives nothing back
        assert await redis.get(conc_key(target.served_name)) == b"2"
        await first.release()
        await second.release()
        # Both finished: the slot is free again.
        again = admission("x")
        await again.admit()
        await again.release()
        assert await redis.get(conc_key(target.served_name)) == b"0"
    finally:
        await redis.delete(conc_key(target.served_name))
        await redis.aclose()


# --- API --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_promote_rollback_revisions_and_the_canary_settings(acme):
    url = "/api/v1/tenants/acme/aliases/support-bot/"
    client = acme.token_client("bob", ["write"], tenant=acme.acme)  # a maintainer may release
    body = {
        "targets": [
            {"version": "support@1", "weight": 90},
            {"version": "support@2", "weight": 10, "max_concurrent": 2},
        ],
        "guard": {"auto_rollback": True, "max_error_rate": 0.1, "max_ttft_ms": 800},
        "reason": "canary @2",
    }
    got = client.put(url, body, format="json")
    assert got.status_code == 200, got.json()
    assert got.json()["targets"][1] == {
        "version": "support@2",
        "weight": 10,
        "max_concurrent": 2,
        "status": "active",
    }
    assert got.json()["guard"] == {
        "auto_rollback": True,
        "max_error_rate": 0.1,
        "max_ttft_ms": 800,
        "window_minutes": 5,
        "min_requests": 20,
    }

    promoted = client.post(url + "promote/", {"version": "support@2"}, format="json")
    assert promoted.status_code == 200, promoted.json()
    assert [(t["version"], t["weight"]) for t in promoted.json()["targets"]] == [("support@2", 100)]

    rolled = client.post(url + "rollback/", {"reason": "slow"}, format="json")
    assert rolled.status_code == 200, rolled.json()
    assert {t["version"]: t["weight"] for t in rolled.json()["targets"]} == {
        "support@1": 90,
        "support@2": 10,
    }

    revisions = acme.token_client("vera", ["read"]).get(url + "revisions/").json()["results"]
    assert [(r["number"], r["action"], r["parent"], r["actor"]) for r in revisions] == [
        (4, "rollback", 1, "bob"),
        (3, "promote", 2, "bob"),
        (2, "set", 1, "bob"),
        (1, "set", None, "alice"),
    ]
    assert revisions[0]["reason"] == "slow" and revisions[2]["reason"] == "canary @2"
    assert revisions[0]["targets"][1]["max_concurrent"] == 2  # the cap came back with @2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("rollback/", {}, 409, "alias.no_previous_revision"),
        ("promote/", {"version": "support@4"}, 400, "alias.version_not_active"),
        ("promote/", {"version": "support@9"}, 404, "alias.unknown_version"),
        ("promote/", {"version": "Support"}, 400, "invalid_request"),
        ("promote/", {}, 400, "invalid_request"),
    ],
)
def test_api_refusals_are_json_with_a_code_and_change_nothing(acme, path, body, status, code):
    alias, client = alias_of(acme), acme.client("alice")  # logging in is audited: first
    before = snapshot(alias)
    response = client.post(f"/api/v1/tenants/acme/aliases/support-bot/{path}", body, format="json")
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    assert snapshot(alias) == before


@pytest.mark.django_db
def test_api_refuses_bad_canary_settings(acme):
    client = acme.client("alice")
    url = "/api/v1/tenants/acme/aliases/support-bot/"
    for guard in ({"max_error_rate": 2}, {"window_minutes": 0}, {"min_requests": 0}):
        body = {"targets": [{"version": "support@1", "weight": 100}], "guard": guard}
        assert client.put(url, body, format="json").status_code == 400
    body = {"targets": [{"version": "support@1", "weight": 100, "max_concurrent": 0}]}
    assert client.put(url, body, format="json").status_code == 400
    assert alias_of(acme).max_error_rate == 0.05


# --- the verdict (pure) -----------------------------------------------------------------------

GUARD = Guard(max_error_rate=0.05, max_ttft_ms=500, min_requests=20, window_minutes=5)


def minutes(*rows: tuple[int, int, float, int]) -> list[MinuteStats]:
    return [MinuteStats(i, r, e, s, c) for i, (r, e, s, c) in enumerate(rows)]


def test_verdict_needs_min_requests():
    assert not canary_verdict(minutes((19, 19, 0, 0)), GUARD).rollback
    verdict = canary_verdict(minutes((10, 10, 0, 0), (10, 0, 0, 0)), GUARD)
    assert verdict.rollback and (verdict.requests, verdict.errors) == (20, 10)
    assert not canary_verdict([], GUARD).rollback


def test_verdict_error_rate_must_pass_the_threshold():
    at = canary_verdict(minutes((100, 5, 100.0, 95)), GUARD)
    assert not at.rollback and at.error_rate == 0.05
    over = canary_verdict(minutes((60, 3, 60.0, 57), (40, 3, 40.0, 37)), GUARD)
    assert over.rollback and over.error_rate == 0.06 and "error rate" in over.reason


def test_verdict_mean_ttft_must_pass_the_threshold():
    at = canary_verdict(minutes((20, 0, 500.0 * 20, 20)), GUARD)
    assert not at.rollback and at.mean_ttft_ms == 500
    over = canary_verdict(minutes((10, 0, 500.0 * 10, 10), (10, 0, 501.0 * 10, 10)), GUARD)
    assert over.rollback and over.mean_ttft_ms == 500.5 and "TTFT" in over.reason
    no_limit = Guard(max_error_rate=0.05, max_ttft_ms=None, min_requests=20, window_minutes=5)
    assert not canary_verdict(minutes((20, 0, 1e6 * 20, 20)), no_limit).rollback
    # Errors carry no TTFT: all-failed minutes judge on the error rate alone.
    assert canary_verdict(minutes((20, 20, 0.0, 0)), GUARD).mean_ttft_ms is None


def test_the_window_counts_only_whole_minutes_after_the_revision_started():
    t = 1_700_000_040.0  # minute-aligned
    assert window_minutes(now=t + 30, window=5, since=t + 10) == range(0)  # same minute
    first = int(t // 60) + 1
    assert window_minutes(now=t + 61, window=5, since=t + 10) == range(first, first + 1)
    assert window_minutes(now=t + 3600, window=5, since=t) == range(
        int((t + 3600) // 60) - 4, int((t + 3600) // 60) + 1
    )


# --- the automatic rollback, fed by the real recorder -----------------------------------------


def record(measurements: list[Measurement]) -> None:
    async def go() -> None:
        redis = aioredis.Redis.from_url(settings.REDIS_URL)
        recorder = Recorder(redis)
        for m in measurements:
            recorder.add(m)
        await recorder.flush()
        await redis.aclose()

    asyncio.run(go())


def measurement(tenant: str, label: str, at: float, *, ok: bool, ttft: float = 40.0) -> Measurement:
    return Measurement(
        tenant=tenant,
        tenant_id=0,
        adapter="support",
        version=label,
        version_id=None,
        pool="",
        served_name="",
        engine="cpu-a",
        served_from="gpu",
        ok=ok,
        ttft_ms=ttft if ok else None,
        e2e_ms=60.0,
        prompt_tokens=5,
        completion_tokens=1 if ok else 0,
        at=at,
    )


@pytest.fixture
def private(acme):
    """acme under a slug of its own, in a stretch of the past: no one else's measurements share
    its Redis fields or minutes, and everything recorded is removed afterwards."""
    acme.acme.slug = f"rel-{uuid.uuid4().hex[:10]}"
    acme.acme.save()
    t0 = (1_600_000_000 // 60 + random.randrange(200_000)) * 60.0
    yield acme, t0
    client = shared_state.client()
    client.delete(
        *[f"lp:gwm:min:{m}" for m in range(int(t0 // 60) - 1, int(t0 // 60) + 12)],
        *[f"lp:gwm:sec:{int(t0) + s}" for s in range(-60, 700)],
        f"lp:usage:{datetime.fromtimestamp(t0, UTC):%Y-%m-%d}",
    )
    for name in ("lp:gwm:counters", "lp:gwm:ttft", "lp:gwm:e2e"):
        mine = [f for f, _ in client.hscan_iter(name, match=f"{acme.acme.slug}|*")]
        if mine:
            client.hdel(name, *mine)


def started_at(alias: Alias, t: float) -> None:
    head = head_of(alias)
    AliasRevision.objects.filter(pk=head.pk).update(created_at=datetime.fromtimestamp(t, UTC))


@pytest.mark.django_db
def test_the_task_rolls_a_failing_canary_back_once_and_not_twice(private):
    world, t0 = private
    slug = world.acme.slug
    alias = canary(world, auto_rollback=True, min_requests=20, max_error_rate=0.05)
    started_at(alias, t0)
    # 25 requests to the canary, 6 failed (24%); the stable version is healthy.
    record(
        [measurement(slug, "support@2", t0 + 61 + i, ok=i >= 6) for i in range(25)]
        + [measurement(slug, "support@1", t0 + 61 + i % 50, ok=True) for i in range(200)]
    )
    assert gateway_tasks.check_canaries(now=t0 + 130) == 1
    assert targets_of(alias) == {"support@1": (100, None)}
    head = head_of(alias)
    assert (head.action, head.actor_label, head.actor_id) == (
        "auto_rollback",
        "auto-rollback",
        None,
    )
    event = AuditEvent.objects.filter(action="alias.auto_rollback").get()
    assert event.after is not None
    assert event.actor_label == "auto-rollback" and event.actor_id is None
    evidence = event.after["evidence"]
    assert (evidence["canary"], evidence["requests"], evidence["errors"]) == ("support@2", 25, 6)
    assert evidence["error_rate"] == 0.24 and evidence["max_error_rate"] == 0.05
    assert evidence["revision"] == 2 and event.after["restored_revision"] == 1

    # The numbers in Redis still say the canary failed; nothing fires a second time, neither
    # the next beat nor a check that judged the old revision a moment before the rollback.
    assert gateway_tasks.check_canaries(now=t0 + 160) == 0
    judged = alias.revisions.get(number=2)
    assert not releases._auto_rollback(alias, expected=judged, reason="late", evidence={})
    assert AuditEvent.objects.filter(action__contains="rollback").count() == 1
    assert alias.revisions.count() == 3
    assert verify_chain().ok


@pytest.mark.django_db
def test_a_canary_restored_by_a_rollback_is_not_judged_on_numbers_from_before_it(private):
    world, t0 = private
    canary(world)  # rev 2: 90/10
    alias = alias_set(
        access=owner(world),
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 50}, {"version": "support@2", "weight": 50}],
        guard={"auto_rollback": True},
    )
    started_at(alias, t0)
    record([measurement(world.acme.slug, "support@2", t0 + 61 + i, ok=False) for i in range(30)])
    checks = releases.check_canaries(client=shared_state.client(), now=t0 + 130)
    assert [c.outcome for c in checks] == ["rolled_back"]
    assert targets_of(alias) == {"support@1": (90, None), "support@2": (10, None)}  # a canary
    started_at(alias, t0 + 125)  # the restored canary started in the minute just judged
    checks = releases.check_canaries(client=shared_state.client(), now=t0 + 150)
    assert [(c.revision, c.outcome) for c in checks] == [(4, "waiting")]
    assert alias.revisions.count() == 4


@pytest.mark.django_db
def test_a_quiet_or_healthy_canary_is_kept_a_slow_one_rolled_back(private):
    world, t0 = private
    slug = world.acme.slug
    alias = canary(world, auto_rollback=True, min_requests=20, max_ttft_ms=300)
    started_at(alias, t0)
    record([measurement(slug, "support@2", t0 + 61 + i, ok=True, ttft=250) for i in range(19)])
    [check] = releases.check_canaries(client=shared_state.client(), now=t0 + 130)
    assert check.verdict is not None
    assert (check.outcome, check.verdict.requests) == ("kept", 19)  # too few to judge
    record([measurement(slug, "support@2", t0 + 121, ok=True, ttft=260)])
    [check] = releases.check_canaries(client=shared_state.client(), now=t0 + 130)
    assert check.verdict is not None
    assert check.outcome == "kept" and check.verdict.mean_ttft_ms == 250.5
    record([measurement(slug, "support@2", t0 + 122, ok=True, ttft=2000) for _ in range(5)])
    Alias.objects.filter(pk=alias.pk).update(auto_rollback=False)
    assert releases.check_canaries(client=shared_state.client(), now=t0 + 130) == []
    Alias.objects.filter(pk=alias.pk).update(auto_rollback=True)
    [check] = releases.check_canaries(client=shared_state.client(), now=t0 + 130)
    assert check.verdict is not None
    assert check.outcome == "rolled_back" and "TTFT" in check.verdict.reason


# --- one real canary through the gateway and the engines --------------------------------------


@pytest.mark.engine
@pytest.mark.django_db(transaction=True)
def test_a_90_10_canary_through_the_gateway_then_rollback(worker_fleet, gateway_server, tmp_path):  # noqa: F811
    from tests.workers.fleet import servable_version

    world = worker_fleet.world
    stable = servable_version(world.support, tmp_path, seed=301)
    new = servable_version(world.support, tmp_path, seed=302)
    alias_set(
        access=owner(world),
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    alias = canary(world)
    token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["inference"], tenant=world.acme
    )
    client = openai.OpenAI(base_url=gateway_server + "/v1", api_key=token.plaintext, max_retries=0)

    def served() -> str:
        reply = client.chat.completions.create(
            model="support-bot", messages=PROMPT, max_tokens=1, temperature=0
        )
        return reply.model

    counts = Counter(served() for _ in range(200))
    assert set(counts) <= {stable.served_name, new.served_name}, counts
    assert 8 <= counts[new.served_name] <= 35, counts  # binomial(200, 0.1), 99.9%: about 8-34

    releases.alias_rollback(access=owner(world), alias=alias, reason="canary done")
    after = Counter(served() for _ in range(20))
    assert after == {stable.served_name: 20}, after

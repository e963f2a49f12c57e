"""Warm-up schedules: each hard rule, the beat entries a policy keeps, the window clock, and the
task's re-check (refused with a placement alarm, once, audited)."""

from __future__ import annotations

import json
import types
from datetime import UTC, datetime, time
from typing import Any
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from adapters.models import Adapter, AdapterVersion, WarmupPolicy
from core.audit_models import AuditEvent
from core.errors import ApplicationError
from portal.audit_verify import verify_chain
from workers import schedules
from workers.models import Engine, EngineAlarm, Residency
from workers.schedules import WarmupWindow, in_window, warmup_problems

pytestmark = pytest.mark.django_db
KEPT = (WarmupPolicy.PINNED, WarmupPolicy.ALWAYS_WARM, WarmupPolicy.PRELOAD_BUSINESS_HOURS)


def make_engine(
    world: Any, name: str, *, pool: str = "shared", gpu: int = 4, cpu: int = 8, base: Any = None
) -> Engine:
    return Engine.objects.create(
        name=name,
        base_model=base or world.base,
        pool=pool,
        url=f"http://{name}.invalid:8000",
        served_model_name="tiny",
        max_loras=gpu,
        max_cpu_loras=cpu,
        adapter_root="/srv/adapters",
    )


def make_adapter(
    world: Any, name: str, policy: str, *, tenant: Any = None, **fields: Any
) -> Adapter:
    return Adapter.objects.create(
        tenant=tenant or world.acme,
        name=name,
        base_model=world.base,
        warmup_policy=policy,
        **fields,
    )


def activate(adapter: Adapter, number: int = 1) -> AdapterVersion:
    return AdapterVersion.objects.create(
        tenant=adapter.tenant,
        adapter=adapter,
        number=number,
        status="active",
        served_name=f"{adapter.tenant.slug}--{adapter.name}--v{number}-0123abcd",
        rank=8,
    )


def codes(problems: list[schedules.Problem]) -> list[str]:
    return [p.code for p in problems]


def business_hours(
    adapter: Adapter,
    days: str = "mon-fri",
    start: str = "09:00",
    end: str = "17:00",
    tz: str = "Europe/Berlin",
) -> Adapter:
    adapter.warmup_policy = WarmupPolicy.PRELOAD_BUSINESS_HOURS
    adapter.warmup_days = days
    adapter.warmup_start = time.fromisoformat(start)
    adapter.warmup_end = time.fromisoformat(end)
    adapter.warmup_timezone = tz
    adapter.save()
    return adapter


# --- the hard rules ---


def test_on_demand_breaks_no_rule_even_without_engines(world):
    assert warmup_problems(adapter=world.support) == []


@pytest.mark.parametrize(
    ("window", "field"),
    [
        (WarmupWindow("mon-fri", None, time(17), "UTC"), "warmup_start"),
        (WarmupWindow("mon-fri", time(9), None, "UTC"), "warmup_end"),
        (WarmupWindow("mon-fri", time(9), time(9), "UTC"), "warmup_end"),
        (WarmupWindow("mon-fri", time(9), time(17), "Mars/Olympus_Mons"), "warmup_timezone"),
        (WarmupWindow("mon-fri", time(9), time(17), "posixrules"), "warmup_timezone"),
        (WarmupWindow("fri-mon", time(9), time(17), "UTC"), "warmup_days"),
        (WarmupWindow("weekdays", time(9), time(17), "UTC"), "warmup_days"),
        (WarmupWindow("1-7", time(9), time(17), "UTC"), "warmup_days"),
    ],
)
def test_a_bad_window_names_its_field(world, window, field):
    make_engine(world, "e1")
    problems = warmup_problems(
        adapter=world.support, policy=WarmupPolicy.PRELOAD_BUSINESS_HOURS, window=window
    )
    assert codes(problems) == ["schedule.bad_window"]
    assert problems[0].field == field and problems[0].message.startswith(f"{field}: ")


def test_a_good_window_over_midnight_passes(world):
    make_engine(world, "e1")
    window = WarmupWindow("fri,sat", time(22), time(2), "America/New_York")
    assert (
        warmup_problems(
            adapter=world.support, policy=WarmupPolicy.PRELOAD_BUSINESS_HOURS, window=window
        )
        == []
    )


def test_no_engine_for_the_base_model_in_the_pool(world):
    from adapters.models import BaseModel

    other = BaseModel.objects.create(name="other-base", source="x", architecture="LlamaForCausalLM")
    make_engine(world, "e-other", base=other)  # the pool serves another base model only
    make_engine(world, "e-dedicated", pool="dedicated")  # right base model, another pool
    problems = warmup_problems(adapter=world.support, policy=WarmupPolicy.ALWAYS_WARM)
    assert codes(problems) == ["schedule.no_engine"]
    assert "'shared'" in problems[0].message and world.base.name in problems[0].message


def test_no_engine_whose_rank_limit_admits_the_active_versions(world):
    Engine.objects.filter(pk=make_engine(world, "e1").pk).update(max_lora_rank=16)
    version = activate(world.support)
    assert warmup_problems(adapter=world.support, policy=WarmupPolicy.ALWAYS_WARM) == []
    AdapterVersion.objects.filter(pk=version.pk).update(rank=32)
    problems = warmup_problems(adapter=world.support, policy=WarmupPolicy.ALWAYS_WARM)
    assert codes(problems) == ["schedule.no_engine"] and "rank 32" in problems[0].message


def test_the_pool_comes_from_the_adapter_then_the_tenant_then_the_default(world, settings):
    make_engine(world, "e-dedicated", pool="dedicated")
    assert codes(warmup_problems(adapter=world.support, policy="always_warm")) == [
        "schedule.no_engine"
    ]
    world.acme.pool = "dedicated"
    world.acme.save()
    world.support.refresh_from_db()
    assert warmup_problems(adapter=world.support, policy="always_warm") == []
    world.support.pool = "nowhere"
    assert codes(warmup_problems(adapter=world.support, policy="always_warm")) == [
        "schedule.no_engine"
    ]
    settings.DEFAULT_POOL = "dedicated"
    world.acme.pool = ""
    world.support.pool = ""
    assert warmup_problems(adapter=world.support, policy="always_warm") == []


def test_pin_quota_counts_the_tenants_pinned_adapters(world):
    make_engine(world, "e1")
    make_engine(world, "e2")
    world.acme.quota_pinned_slots = 1
    world.acme.save()
    make_adapter(world, "billing", WarmupPolicy.PINNED)
    make_adapter(world, "other", WarmupPolicy.PINNED, tenant=world.globex)  # another tenant's
    problems = warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED)
    assert codes(problems) == ["schedule.pin_quota"]
    assert "acme/billing" in problems[0].message and "quota_pinned_slots" in problems[0].message
    world.acme.quota_pinned_slots = 2
    world.acme.save()
    world.support.tenant.refresh_from_db()
    assert warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED) == []


def test_every_active_version_of_a_pinned_adapter_takes_a_slot(world):
    make_engine(world, "e1")
    world.acme.quota_pinned_slots = 2
    world.acme.save()
    activate(world.support, 1)
    activate(world.support, 2)  # a canary: both versions get pinned
    assert warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED) == []
    activate(world.support, 3)
    assert codes(warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED)) == [
        "schedule.pin_quota"
    ]


def test_pin_budget_is_the_pools_max_pins(world):
    world.acme.quota_pinned_slots = 10
    world.acme.save()
    make_engine(world, "e1", gpu=2, cpu=8)  # max_pins = min(2-1, 8-1) = 1
    make_adapter(world, "billing", WarmupPolicy.PINNED)
    problems = warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED)
    assert codes(problems) == ["schedule.pin_budget"]
    assert "e1: 1" in problems[0].message
    make_engine(world, "e2", gpu=2, cpu=3)  # min(1, 2) = 1 more
    assert warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED) == []
    # Pinned adapters of another pool do not count against this one.
    make_adapter(world, "far", WarmupPolicy.PINNED, pool="dedicated")
    assert warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED) == []


def test_last_free_slot_keeps_one_cpu_cache_slot_free_on_every_engine(world):
    world.acme.quota_warm_slots = 10  # the pool's room decides here, not the tenant's plan
    world.acme.save()
    make_engine(world, "e1", gpu=2, cpu=3)  # keeps at most 2 warm versions
    make_engine(world, "e2", gpu=2, cpu=8)
    make_adapter(world, "billing", WarmupPolicy.ALWAYS_WARM)
    business_hours(make_adapter(world, "hours", WarmupPolicy.ON_DEMAND))
    problems = warmup_problems(adapter=world.support, policy=WarmupPolicy.ALWAYS_WARM)
    assert codes(problems) == ["schedule.last_free_slot"]
    assert "e1 (keeps at most 2)" in problems[0].message and "e2" not in problems[0].message
    Adapter.objects.filter(name="hours").update(warmup_policy=WarmupPolicy.ON_DEMAND)
    assert warmup_problems(adapter=world.support, policy=WarmupPolicy.ALWAYS_WARM) == []


def test_pins_beside_warm_versions_must_leave_a_free_cpu_slot(world):
    world.acme.quota_pinned_slots = 10
    world.acme.save()
    make_engine(world, "e1", gpu=4, cpu=3)  # max_pins 2, cpu room 2
    make_adapter(world, "billing", WarmupPolicy.ALWAYS_WARM)  # 1 warm: 1 room left for pins
    make_adapter(world, "pinned", WarmupPolicy.PINNED)
    problems = warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED)
    assert codes(problems) == ["schedule.last_free_slot"]


def test_every_broken_rule_is_listed(world):
    world.acme.quota_pinned_slots = 0
    world.acme.save()
    make_engine(world, "e1", gpu=1, cpu=1)  # no pins at all, no room for anything
    assert codes(warmup_problems(adapter=world.support, policy=WarmupPolicy.PINNED)) == [
        "schedule.pin_quota",
        "schedule.pin_budget",
        "schedule.last_free_slot",
    ]


# --- the window clock ---


def berlin_friday_night(adapter: Adapter) -> Adapter:
    return business_hours(adapter, days="fri", start="22:00", end="02:00", tz="Europe/Berlin")


@pytest.mark.parametrize(
    ("utc", "inside"),
    [
        ("2026-01-16T20:59", False),  # Fri 21:59 Berlin (CET, UTC+1)
        ("2026-01-16T21:00", True),  # Fri 22:00
        ("2026-01-17T00:30", True),  # Sat 01:30, after midnight: still Friday's window
        ("2026-01-17T01:00", False),  # Sat 02:00: closed
        ("2026-01-17T21:30", False),  # Sat 22:30: Saturday is not listed
        ("2026-01-18T00:30", False),  # Sun 01:30: Saturday's window, which does not exist
        ("2026-07-17T20:30", True),  # Fri 22:30 Berlin in summer (CEST, UTC+2)
        ("2026-07-17T19:30", False),  # Fri 21:30 CEST: the same UTC hour was inside in winter
    ],
)
def test_in_window_over_midnight(world, utc, inside):
    adapter = berlin_friday_night(world.support)
    now = datetime.fromisoformat(utc).replace(tzinfo=UTC)
    assert in_window(adapter, now) is inside


def test_in_window_in_two_time_zones_at_once(world):
    ny = business_hours(world.support, tz="America/New_York")
    tokyo = business_hours(world.legal, tz="Asia/Tokyo")
    # Monday 2026-01-12 14:30 UTC: 09:30 in New York, 23:30 in Tokyo.
    now = datetime(2026, 1, 12, 14, 30, tzinfo=UTC)
    assert in_window(ny, now) and not in_window(tokyo, now)
    # Tuesday 2026-01-13 01:00 UTC: Monday 20:00 in New York, Tuesday 10:00 in Tokyo.
    now = datetime(2026, 1, 13, 1, 0, tzinfo=UTC)
    assert not in_window(ny, now) and in_window(tokyo, now)


def test_in_window_follows_daylight_saving_time(world):
    ny = business_hours(world.support, tz="America/New_York")
    # 13:30 UTC is 08:30 EST in winter (closed) and 09:30 EDT in summer (open); 2026-03-09 is
    # the Monday after the switch.
    assert not in_window(ny, datetime(2026, 3, 2, 13, 30, tzinfo=UTC))
    assert in_window(ny, datetime(2026, 3, 9, 13, 30, tzinfo=UTC))
    # A local time given in another zone is compared on the adapter's wall clock.
    assert in_window(ny, datetime(2026, 3, 9, 14, 30, tzinfo=ZoneInfo("Europe/Berlin")))


def test_tenant_hours_are_the_windows_of_its_business_hours_adapters(world):
    """What the demand tracker is told (workers.cache_policy.hours): a tenant is open when any
    of its business-hours adapters is; a tenant without one has no hours."""
    business_hours(world.support, tz="America/New_York")  # acme
    make_adapter(world, "night", WarmupPolicy.ON_DEMAND)  # acme, no window
    hours = schedules.tenant_hours()
    # Monday 2026-01-12 14:30 UTC: 09:30 in New York; 23:00 UTC: 18:00, closed.
    assert hours("acme", datetime(2026, 1, 12, 14, 30, tzinfo=UTC).timestamp()) is True
    assert hours("acme", datetime(2026, 1, 12, 23, 0, tzinfo=UTC).timestamp()) is False
    assert hours("globex", datetime(2026, 1, 12, 14, 30, tzinfo=UTC).timestamp()) is None
    # A second adapter in Tokyo: acme is open in either window.
    make_adapter(world, "tokyo", WarmupPolicy.ON_DEMAND)
    business_hours(Adapter.objects.get(name="tokyo"), tz="Asia/Tokyo")
    hours = schedules.tenant_hours()
    assert hours("acme", datetime(2026, 1, 13, 1, 0, tzinfo=UTC).timestamp()) is True  # 10:00 JST
    assert hours("acme", datetime(2026, 1, 12, 23, 0, tzinfo=UTC).timestamp()) is False


def test_in_window_is_false_without_a_complete_window(world):
    world.support.warmup_policy = WarmupPolicy.PRELOAD_BUSINESS_HOURS
    assert not in_window(world.support, datetime(2026, 1, 12, 12, tzinfo=UTC))


# --- beat entries ---


class Sync:
    """sync_adapter_schedule, keeping the one-shot applies it enqueues after commit unrun."""

    def __init__(self, capture: Any) -> None:
        self.capture = capture
        self.applies: list = []

    def __call__(self, adapter: Adapter, **kwargs: Any) -> str:
        callbacks: list = []
        try:
            with self.capture(execute=False) as callbacks:
                return schedules.sync_adapter_schedule(adapter=adapter, **kwargs)
        finally:
            self.applies.extend(callbacks)  # filled when the capture ends


@pytest.fixture
def sync(django_capture_on_commit_callbacks) -> Sync:
    return Sync(django_capture_on_commit_callbacks)


def entries() -> dict[str, PeriodicTask]:
    return {e.name: e for e in PeriodicTask.objects.select_related("crontab")}


def test_sync_creates_the_open_and_close_entries(world, sync):
    adapter = business_hours(world.support)
    phase = sync(
        adapter=adapter,
        now=datetime(2026, 1, 12, 12, tzinfo=UTC),  # Mon 13:00 Berlin
    )
    assert phase == "open" and len(sync.applies) == 1
    got = entries()
    assert set(got) == {"warmup:acme/support:open", "warmup:acme/support:close"}
    for name, at, kw_phase in (("open", "9", "open"), ("close", "17", "close")):
        entry = got[f"warmup:acme/support:{name}"]
        assert entry.task == "workers.schedules.apply_warmup_window" and entry.enabled
        assert json.loads(entry.kwargs) == {"adapter_id": adapter.pk, "phase": kw_phase}
        cron = entry.crontab
        assert (cron.minute, cron.hour, cron.day_of_week) == ("0", at, "mon,tue,wed,thu,fri")
        assert (cron.day_of_month, cron.month_of_year) == ("*", "*")
        assert str(cron.timezone) == "Europe/Berlin"
        assert "acme/support" in entry.description


def test_a_window_over_midnight_closes_on_the_next_day(world, sync):
    adapter = business_hours(
        world.support, days="fri,sat", start="22:30", end="01:15", tz="Asia/Tokyo"
    )
    phase = sync(
        adapter=adapter,
        now=datetime(2026, 1, 12, 12, tzinfo=UTC),  # Mon 21:00 Tokyo
    )
    assert phase == "close"
    got = entries()
    opening, closing = (
        got["warmup:acme/support:open"].crontab,
        got["warmup:acme/support:close"].crontab,
    )
    assert (opening.hour, opening.minute, opening.day_of_week) == ("22", "30", "fri,sat")
    assert (closing.hour, closing.minute, closing.day_of_week) == ("1", "15", "sun,sat")
    assert str(closing.timezone) == "Asia/Tokyo"


def test_sync_is_idempotent_and_follows_changes(world, sync):
    adapter = business_hours(world.support)
    sync(adapter)
    first = {name: (e.pk, e.crontab_id) for name, e in entries().items()}
    crontabs = CrontabSchedule.objects.count()
    sync(adapter)
    assert {name: (e.pk, e.crontab_id) for name, e in entries().items()} == first
    assert CrontabSchedule.objects.count() == crontabs
    # An operator's "disabled" in the admin survives a sync; the times follow the policy.
    PeriodicTask.objects.filter(name="warmup:acme/support:open").update(enabled=False)
    adapter = business_hours(adapter, start="08:15", tz="UTC")
    sync(adapter)
    got = entries()
    assert got["warmup:acme/support:open"].pk == first["warmup:acme/support:open"][0]
    assert not got["warmup:acme/support:open"].enabled
    assert (
        got["warmup:acme/support:open"].crontab.hour,
        got["warmup:acme/support:open"].crontab.minute,
    ) == ("8", "15")
    assert str(got["warmup:acme/support:close"].crontab.timezone) == "UTC"


@pytest.mark.parametrize(
    ("policy", "phase"),
    [("always_warm", "open"), ("pinned", "open"), ("on_demand", "close")],
)
def test_other_policies_delete_the_entries_and_apply_once(world, sync, policy, phase):
    adapter = business_hours(world.support)
    sync(adapter)
    # An entry for this adapter under an old name (the operator renamed it) goes too; another
    # adapter's entry stays.
    PeriodicTask.objects.filter(name="warmup:acme/support:close").update(name="renamed")
    business_hours(world.legal)
    sync(world.legal)
    adapter.warmup_policy = policy
    adapter.save()
    assert sync(adapter) == phase
    assert set(entries()) == {"warmup:globex/legal:open", "warmup:globex/legal:close"}
    assert len(sync.applies) == 3  # one apply per sync


def test_sync_refuses_a_bad_window(world, sync):
    adapter = business_hours(world.support)
    adapter.warmup_end = adapter.warmup_start
    with pytest.raises(ApplicationError) as err:
        sync(adapter)
    assert err.value.code == "schedule.bad_window"
    assert not PeriodicTask.objects.exists() and not sync.applies


def test_the_enqueued_apply_runs_the_task_for_the_adapter(world, sync):
    from celery.signals import task_postrun

    ran: list[tuple[dict, str]] = []

    def record(sender=None, kwargs=None, retval=None, **_):
        ran.append((kwargs, retval))

    world.support.warmup_policy = WarmupPolicy.ALWAYS_WARM
    world.support.save()
    sync(world.support)
    app = schedules.apply_warmup_window.app
    eager, app.conf.task_always_eager = app.conf.task_always_eager, True
    task_postrun.connect(record, sender=schedules.apply_warmup_window, weak=False)
    try:
        sync.applies[0]()
    finally:
        task_postrun.disconnect(record, sender=schedules.apply_warmup_window)
        app.conf.task_always_eager = eager
    # The pool has no engine: the task ran, checked the rules and did nothing.
    assert ran == [
        ({"adapter_id": world.support.pk, "phase": "open"}, "refused: schedule.no_engine")
    ]


# --- the task's re-check ---


def test_the_task_refuses_broken_rules_with_one_audited_alarm_per_engine(world):
    e1, e2 = make_engine(world, "e1"), make_engine(world, "e2")
    make_engine(world, "e-other-pool", pool="dedicated")
    Adapter.objects.filter(pk=world.support.pk).update(warmup_policy=WarmupPolicy.PINNED)
    version = activate(world.support)
    # The policy passed when it was saved; then the tenant's quota was lowered.
    world.acme.quota_pinned_slots = 0
    world.acme.save()
    for _ in range(2):  # beat fires again while the rule is still broken
        result = schedules.warmup_apply(adapter_id=world.support.pk, phase="open")
        assert result == "refused: schedule.pin_quota"
    alarms = EngineAlarm.objects.filter(kind="placement", cleared_at__isnull=True)
    assert sorted(a.engine.name for a in alarms) == ["e1", "e2"]
    assert {a.subject for a in alarms} == {version.served_name}
    assert all("quota_pinned_slots" in a.message for a in alarms)
    assert alarms[0].details["problems"][0]["code"] == "schedule.pin_quota"
    events = AuditEvent.objects.filter(action="engine.alarm.raise")
    assert sorted(events.values_list("object_id", flat=True)) == [e1.name, e2.name]
    assert {(e.after or {})["subject"] for e in events} == {version.served_name}
    assert not Residency.objects.exists()  # nothing was asked of the fleet
    assert verify_chain().ok


def test_the_task_for_a_deleted_adapter_removes_its_entries(world, sync):
    business_hours(world.support)
    sync(world.support)
    adapter_id = world.support.pk
    world.support.delete()
    assert schedules.warmup_apply(adapter_id=adapter_id, phase="open") == "gone"
    assert not PeriodicTask.objects.exists()


# --- the task's wiring (unit test: the fleet's functions are replaced by a fake) ---


@pytest.fixture
def fake_fleet():
    """Stands in for workers.desired, so only the task's choices are tested here."""
    fake = types.SimpleNamespace(
        desire_warm=mock.Mock(return_value=[]),
        desire_pinned=mock.Mock(return_value=[]),
        release_warm=mock.Mock(return_value=[]),
    )
    with mock.patch.object(schedules, "desired", fake):
        yield fake


def called_with(fn: mock.Mock) -> list[tuple[str, str]]:
    return [(c.kwargs["version"].served_name, c.kwargs["actor"]) for c in fn.call_args_list]


@pytest.mark.parametrize(
    ("policy", "phase", "wanted"),
    [
        ("pinned", "open", "desire_pinned"),
        ("always_warm", "open", "desire_warm"),
        ("always_warm", "close", "desire_warm"),  # a stale close never releases always-warm
        ("preload_on_business_hours", "open", "desire_warm"),
        ("preload_on_business_hours", "close", "release_warm"),
        ("on_demand", "open", "release_warm"),  # a stale open never warms on-demand
    ],
)
def test_unit_task_wiring_calls_the_fleet_for_each_active_version(
    world, fake_fleet, policy, phase, wanted
):
    make_engine(world, "e1")
    world.acme.quota_pinned_slots = 2
    world.acme.save()
    if policy == "preload_on_business_hours":
        business_hours(world.support)
    Adapter.objects.filter(pk=world.support.pk).update(warmup_policy=policy)
    v1, v2 = activate(world.support, 1), activate(world.support, 2)
    AdapterVersion.objects.create(  # not active: never warmed
        tenant=world.acme, adapter=world.support, number=3, status="staged", served_name="x-v3"
    )
    schedules.warmup_apply(adapter_id=world.support.pk, phase=phase)
    for name in ("desire_warm", "desire_pinned", "release_warm"):
        expected = [(v1.served_name, "schedule"), (v2.served_name, "schedule")]
        assert called_with(getattr(fake_fleet, name)) == (expected if name == wanted else [])


def test_unit_task_wiring_alarms_when_the_fleet_cannot_place_and_clears_after(world, fake_fleet):
    make_engine(world, "e1")
    Adapter.objects.filter(pk=world.support.pk).update(warmup_policy=WarmupPolicy.PINNED)
    version = activate(world.support)
    fake_fleet.desire_pinned.side_effect = ApplicationError("fleet.no_engine", "No engine is up.")
    assert schedules.warmup_apply(adapter_id=world.support.pk, phase="open") == "pinned 0/1"
    alarm = EngineAlarm.objects.get(subject=version.served_name, cleared_at__isnull=True)
    assert alarm.details["problems"] == [{"code": "fleet.no_engine", "message": "No engine is up."}]
    fake_fleet.desire_pinned.side_effect = None
    assert schedules.warmup_apply(adapter_id=world.support.pk, phase="open") == "pinned 1/1"
    alarm.refresh_from_db()
    assert alarm.cleared_at is not None
    assert AuditEvent.objects.filter(action="engine.alarm.clear", object_id="e1").count() == 1


def test_unit_task_wiring_ignores_an_unknown_phase(world, fake_fleet):
    assert schedules.warmup_apply(adapter_id=world.support.pk, phase="sometimes") == "ignored"
    assert not fake_fleet.release_warm.called


# --- the task with the real fleet services (engines need not run: only desired state is set) ---


def desired_states(version: AdapterVersion) -> dict[str, str]:
    return dict(
        Residency.objects.filter(version=version).values_list("engine__name", "desired_state")
    )


def test_the_task_keeps_a_pinned_or_warm_adapter_in_desired_state(world):
    make_engine(world, "e1")
    make_engine(world, "e2")
    Adapter.objects.filter(pk=world.support.pk).update(warmup_policy=WarmupPolicy.PINNED)
    version = activate(world.support)
    assert schedules.warmup_apply(adapter_id=world.support.pk, phase="open") == "pinned 1/1"
    assert list(desired_states(version).values()) == ["pinned"]  # on one engine
    assert schedules.warmup_apply(adapter_id=world.support.pk, phase="open") == "pinned 1/1"
    assert len(desired_states(version)) == 1  # idempotent: still one pin
    Adapter.objects.filter(pk=world.support.pk).update(warmup_policy=WarmupPolicy.ALWAYS_WARM)
    schedules.warmup_apply(adapter_id=world.support.pk, phase="open")
    assert desired_states(version) == {"e1": "resident_gpu", "e2": "resident_gpu"}
    business_hours(world.support)
    assert schedules.warmup_apply(adapter_id=world.support.pk, phase="close") == "released 1"
    assert desired_states(version) == {"e1": "registered", "e2": "registered"}
    reasons = set(Residency.objects.values_list("desired_reason", flat=True))
    assert reasons == {"business hours closed (mon-fri 09:00-17:00 Europe/Berlin)"}


@pytest.mark.parametrize("others", [3, 30])
def test_the_rule_check_runs_a_fixed_number_of_queries(world, others, django_assert_num_queries):
    make_engine(world, "e1", gpu=64, cpu=128)
    world.acme.quota_pinned_slots = 100
    world.acme.save()
    for i in range(others):
        adapter = make_adapter(world, f"a{i}", KEPT[i % 3])
        activate(adapter)
    adapter = Adapter.objects.select_related("tenant", "base_model").get(pk=world.support.pk)
    # active versions, tenant's pins, engines, the pool's kept adapters
    with django_assert_num_queries(4):
        assert warmup_problems(adapter=adapter, policy=WarmupPolicy.PINNED) == []

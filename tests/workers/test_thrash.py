"""The thrash alarm: minute buckets and window boundaries, sustained churn vs a burst, and the
alarm raised and cleared once each, audited, whatever how often the check runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adapters.models import AdapterVersion
from core.audit_models import AuditEvent
from workers.models import Engine, EngineAlarm, FleetAction
from workers.thrash import alarms_check_thrash, thrash_state

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


def spread(per_minute: list[int], *, end: datetime = NOW) -> list[datetime]:
    """`per_minute[i]` events inside minute i of the five minutes before `end`, oldest first."""
    start = end - len(per_minute) * MINUTE
    times = []
    for i, count in enumerate(per_minute):
        times += [start + i * MINUTE + (j + 1) * (MINUTE / (count + 1)) for j in range(count)]
    return times


def state(times, **kwargs):
    return thrash_state(times, now=NOW, per_minute=30.0, window_s=300, **kwargs)


# --- the pure rule ---


def test_events_fall_into_the_right_minute():
    result = state([NOW, NOW - MINUTE, NOW - MINUTE - SECOND, NOW - 5 * MINUTE + SECOND])
    # Minutes are right-closed: (NOW-1min, NOW] holds NOW; NOW-1min belongs to the minute before.
    assert result.per_minute_counts == (1, 0, 0, 2, 1)


def test_events_outside_the_window_are_ignored():
    result = state([NOW - 5 * MINUTE, NOW - 6 * MINUTE, NOW + SECOND])
    assert result.total == 0 and result.calm and not result.thrashing


def test_sustained_churn_above_the_threshold_is_thrashing():
    assert state(spread([31] * 5)).thrashing


def test_exactly_at_the_threshold_is_not():
    assert not state(spread([30] * 5)).thrashing


@pytest.mark.parametrize("quiet_minute", range(5))
def test_one_quiet_minute_anywhere_in_the_window_is_not_thrashing(quiet_minute):
    counts = [100] * 5
    counts[quiet_minute] = 30
    result = state(spread(counts))
    assert not result.thrashing
    assert not result.calm  # but the alarm would not clear either: hysteresis


def test_a_burst_is_not_thrashing():
    result = state(spread([0, 0, 0, 0, 500]))
    assert not result.thrashing and result.total == 500


def test_four_minutes_of_churn_are_not_yet_thrashing():
    # The window ends now: the oldest minute is quiet until the fifth minute of churn.
    assert not state(spread([0, 40, 40, 40, 40])).thrashing
    assert state(spread([40, 40, 40, 40, 40])).thrashing


def test_calm_is_the_windows_mean_at_or_below_the_threshold():
    assert state(spread([30] * 5)).calm
    assert not state(spread([31] * 5)).calm
    assert state(spread([0, 0, 0, 0, 150])).calm


def test_a_partial_minute_window_rounds_up():
    result = thrash_state(spread([31, 31]), now=NOW, per_minute=30.0, window_s=90)
    assert result.window_s == 120 and result.thrashing


# --- the alarm ---


@pytest.fixture
def engines(world, settings):
    settings.FLEET_THRASH_PER_MINUTE = 30.0
    settings.FLEET_THRASH_WINDOW_SECONDS = 300
    return [
        Engine.objects.create(
            name=name,
            base_model=world.base,
            url=f"http://{name}.internal:8000",
            served_model_name="tiny-base",
            adapter_root="/srv/adapters",
        )
        for name in ("e1", "e2")
    ]


def churn(engine: Engine, per_minute: list[int], *, end: datetime = NOW, kinds=("load", "evict")):
    version = AdapterVersion.objects.first()
    FleetAction.objects.bulk_create(
        FleetAction(
            engine=engine,
            version=version,
            served_name="acme--support--v1",
            kind=kinds[i % len(kinds)],
            created_at=at,
        )
        for i, at in enumerate(spread(per_minute, end=end))
    )


@pytest.fixture
def version(world):
    return AdapterVersion.objects.create(
        tenant=world.acme, adapter=world.support, number=1, served_name="acme--support--v1-00"
    )


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def test_thrashing_raises_one_alarm_once(engines, version):
    e1, e2 = engines
    churn(e1, [40] * 5)
    churn(e2, [40, 40, 40, 40, 10])  # the last minute was quiet
    changes = alarms_check_thrash(now=NOW)
    assert [(c.engine, c.change) for c in changes] == [("e1", "raised")]
    alarm = EngineAlarm.objects.get()
    assert (alarm.engine, alarm.kind, alarm.cleared_at) == (e1, "thrash", None)
    assert alarm.details["per_minute_counts"] == [40] * 5
    assert "--max-cpu-loras" in alarm.message
    (event,) = events("engine.alarm.raise")
    assert event.after is not None
    assert event.object_id == "e1" and event.after["alarm"] == alarm.pk

    assert alarms_check_thrash(now=NOW) == []
    assert alarms_check_thrash(now=NOW + SECOND) == []
    assert EngineAlarm.objects.count() == 1 and len(events("engine.alarm.raise")) == 1


def test_the_alarm_clears_once_when_calm_and_can_be_raised_again(engines, version):
    e1, _ = engines
    churn(e1, [40] * 5)
    (raised,) = alarms_check_thrash(now=NOW)
    # One minute later the last minute was quiet: no longer thrashing, but not calm yet (mean 32).
    assert alarms_check_thrash(now=NOW + MINUTE) == []
    assert EngineAlarm.objects.get().cleared_at is None
    later = NOW + 3 * MINUTE  # mean (40+40+0+0+0)/5 = 16: calm
    (cleared,) = alarms_check_thrash(now=later)
    assert (cleared.change, cleared.alarm_id) == ("cleared", raised.alarm_id)
    assert EngineAlarm.objects.get().cleared_at == later
    (event,) = events("engine.alarm.clear")
    assert event.after is not None
    assert event.object_id == "e1" and event.after["alarm"] == raised.alarm_id
    assert alarms_check_thrash(now=later) == []
    assert len(events("engine.alarm.clear")) == 1

    churn(e1, [50] * 5, end=NOW + 20 * MINUTE)
    (again,) = alarms_check_thrash(now=NOW + 20 * MINUTE)
    assert again.change == "raised" and again.alarm_id != raised.alarm_id
    assert EngineAlarm.objects.filter(cleared_at__isnull=True).count() == 1


def test_only_loads_and_evictions_count(engines, version):
    e1, _ = engines
    churn(e1, [40] * 5, kinds=("warm", "unload", "stage", "pin"))
    assert alarms_check_thrash(now=NOW) == []
    churn(e1, [40] * 5, kinds=("load",))
    assert [c.change for c in alarms_check_thrash(now=NOW)] == ["raised"]


def test_other_alarms_on_the_engine_are_left_alone(engines, version):
    e1, _ = engines
    EngineAlarm.objects.create(engine=e1, kind="quarantine", subject="v1", message="bad file")
    EngineAlarm.objects.create(engine=e1, kind="thrash", subject="other", message="not ours")
    churn(e1, [40] * 5)
    assert [c.change for c in alarms_check_thrash(now=NOW)] == ["raised"]
    assert alarms_check_thrash(now=NOW + timedelta(hours=1))[0].change == "cleared"
    assert EngineAlarm.objects.filter(cleared_at__isnull=True).count() == 2

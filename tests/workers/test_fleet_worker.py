"""The fleet as it runs: a real Celery worker on the engines' node queues, a real beat, two real
CPU vLLM engines. Release places a version, twenty concurrent misses cause one load, an engine
restart is repaired by reconciliation alone, and disable leaves every engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.utils import timezone

from adapters.access import AccessContext
from adapters.models import VersionStatus
from adapters.services.lifecycle import version_disable, version_release
from tests.workers.fleet import residency_report, servable_version
from workers.desired import request_load, set_desired
from workers.models import Engine, EngineState, FleetAction, Residency

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

WAIT_S = 240.0  # bounds a broken run only; nothing asserts on how fast it went


def wait_for(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def resident_on(handle) -> set[str]:
    try:
        return set(residency_report(handle)["resident"])
    except Exception:  # the engine is restarting
        return set()


def test_twenty_concurrent_misses_cause_one_load(worker_fleet, tmp_path):
    version = servable_version(worker_fleet.world.support, tmp_path, seed=81)

    def one(_: int):
        try:
            return request_load(version=version, engine=worker_fleet.a)
        finally:
            connection.close()  # each thread's own database connection

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(one, range(20)))

    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert sum(r.leader for r in results) == 1
    engine_says = residency_report(worker_fleet.handle_a)
    assert engine_says["loads"][version.served_name] == 1
    assert FleetAction.objects.filter(served_name=version.served_name, kind="load").count() == 1


def test_release_places_the_version_without_anyone_asking(worker_fleet, tmp_path):
    version = servable_version(
        worker_fleet.world.support, tmp_path, seed=82, status=VersionStatus.STAGED
    )
    version_release(
        version=version, access=AccessContext.for_user(worker_fleet.world.users["alice"])
    )

    wait_for(
        "the released version on an engine",
        lambda: (
            version.served_name
            in resident_on(worker_fleet.handle_a) | resident_on(worker_fleet.handle_b)
        ),
    )


def test_restart_is_repaired_by_reconciliation_and_disable_leaves_every_engine(
    worker_fleet, tmp_path, engine_control, celery_beat_process
):
    keep, drop = (
        servable_version(worker_fleet.world.support, tmp_path, seed=90 + i) for i in range(2)
    )
    for engine in (worker_fleet.a, worker_fleet.b):
        for version in (keep, drop):
            set_desired(version=version, engine=engine, state="registered", reason="test")
    both = {keep.served_name, drop.served_name}
    wait_for("both versions on A", lambda: both <= resident_on(worker_fleet.handle_a))
    wait_for("both versions on B", lambda: both <= resident_on(worker_fleet.handle_b))

    restarted_at = timezone.now()
    engine_control.stop(worker_fleet.handle_a)
    engine_control.start(worker_fleet.handle_a)
    # No request, no call: the beat's reconcile brings them back.
    wait_for("reconcile to restore A", lambda: both <= resident_on(worker_fleet.handle_a))
    # A restarted engine forgot everything, so what it holds the controller loaded again since.
    # (Asserting it empty right after the restart raced the reconcile, which can win: the beat
    # probes every few seconds and a tiny adapter loads in well under one.)
    reloaded = Residency.objects.filter(engine=worker_fleet.a, version__in=[keep, drop])
    assert sorted(r.loaded_at > restarted_at for r in reloaded if r.loaded_at) == [True, True]
    wait_for(
        "engine A up again",
        lambda: Engine.objects.get(pk=worker_fleet.a.pk).state == EngineState.UP,
    )

    version_disable(
        version=drop,
        access=AccessContext.for_user(worker_fleet.world.users["alice"]),
        reason="bad replies",
    )
    wait_for(
        "disable to leave both engines",
        lambda: (
            drop.served_name
            not in resident_on(worker_fleet.handle_a) | resident_on(worker_fleet.handle_b)
        ),
    )
    assert keep.served_name in resident_on(worker_fleet.handle_a)
    assert keep.served_name in resident_on(worker_fleet.handle_b)


def test_a_business_hours_window_warms_then_releases_the_version(
    worker_fleet, tmp_path, celery_beat_process
):
    """A real window on the real clock, opened and closed by the real beat."""
    from datetime import timedelta

    from django.utils import timezone

    from adapters.access import AccessContext
    from adapters.services.registry import adapter_update
    from workers.models import Residency

    world = worker_fleet.world
    version = servable_version(world.support, tmp_path, seed=95)
    now = timezone.now().astimezone(ZoneInfo("Europe/Berlin"))
    # Two minutes ahead: beat has started and read the new entries long before the window opens.
    opens = (now + timedelta(minutes=2)).replace(second=0, microsecond=0)
    closes = opens + timedelta(minutes=1)
    adapter_update(
        access=AccessContext.for_user(world.users["alice"]),
        adapter=world.support,
        warmup_policy="preload_on_business_hours",
        warmup_timezone="Europe/Berlin",
        warmup_days="*",
        warmup_start=opens.time(),
        warmup_end=closes.time(),
    )
    assert version.served_name not in resident_on(worker_fleet.handle_a)

    def desired() -> set[str]:
        return set(
            Residency.objects.filter(version=version).values_list("desired_state", flat=True)
        )

    wait_for("the window to open", lambda: desired() == {"resident_gpu"}, timeout=300)
    assert timezone.now() >= opens - timedelta(seconds=2)  # the beat opened it, not the sync
    wait_for(
        "the version warm on both engines",
        lambda: (
            version.served_name in resident_on(worker_fleet.handle_a)
            and version.served_name in resident_on(worker_fleet.handle_b)
        ),
    )
    wait_for("the window to close", lambda: desired() == {"registered"}, timeout=300)
    assert timezone.now() >= closes - timedelta(seconds=2)
    reasons = set(
        Residency.objects.filter(version=version).values_list("desired_reason", flat=True)
    )
    assert all("closed" in r for r in reasons), reasons

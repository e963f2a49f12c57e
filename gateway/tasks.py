"""Celery tasks of the gateway: thin wrappers around gateway.usage, and the canary check that
reads the gateway's request measurements (adapters.services.releases decides, the registry
cannot reach the fleet's Redis client itself)."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from adapters.services.releases import check_canaries as check
from gateway.usage import usage_persist
from workers import shared_state


@shared_task(acks_late=True, ignore_result=True)
def persist_usage() -> dict:
    """Beat entry (every 60 s): today's and yesterday's usage totals from Redis to DailyUsage."""
    return asdict(usage_persist(days=2))


@shared_task(acks_late=True, name="gateway.tasks.check_canaries")
def check_canaries(now: float | None = None) -> int:
    """Beat entry (30 s): roll back guarded canaries whose error rate or TTFT passed their limit.

    Harmless when redelivered or run twice at once: a rollback happens once per revision.
    `now` (epoch seconds) is for tests; beat passes nothing.
    """
    checks = check(client=shared_state.client(), now=now)
    return sum(c.outcome == "rolled_back" for c in checks)

"""Celery tasks of the gateway: thin wrappers around gateway.usage."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from gateway.usage import usage_persist


@shared_task(acks_late=True, ignore_result=True)
def persist_usage() -> dict:
    """Beat entry (every 60 s): today's and yesterday's usage totals from Redis to DailyUsage."""
    return asdict(usage_persist(days=2))

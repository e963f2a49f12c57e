"""The fleet's reactions to the registry: thin; the work is in workers.desired and
workers.schedules."""

from __future__ import annotations

from typing import Any

from workers.desired import on_version_status
from workers.schedules import sync_adapter_schedule


def on_version_status_changed(
    sender: Any, *, version: Any, before: str, after: str, actor: Any, **_: Any
) -> None:
    on_version_status(version=version, before=before, after=after, actor=actor)


def on_adapter_schedule_changed(sender: Any, *, adapter: Any, **_: Any) -> None:
    sync_adapter_schedule(adapter=adapter)

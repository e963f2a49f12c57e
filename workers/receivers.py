"""The fleet's reactions to the registry: thin; the work is in workers.desired."""

from __future__ import annotations

from typing import Any

from workers.desired import on_version_status


def on_version_status_changed(
    sender: Any, *, version: Any, before: str, after: str, actor: Any, **_: Any
) -> None:
    on_version_status(version=version, before=before, after=after, actor=actor)

"""Celery tasks by their registered names, for the modules below an app's task module.

Task modules sit on top of their app: they import services, and no service imports them (that
made circles between files). A service that starts a task after commit looks it up here; each
app's AppConfig.ready() imports its task module, so every process has its tasks registered.
"""

from __future__ import annotations

from typing import Any

from celery import current_app


def task_named(name: str) -> Any:
    """The registered task `name` (its `name=`, else `module.function`); KeyError if none."""
    return current_app.tasks[name]

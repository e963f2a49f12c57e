"""Shared fixtures: the personas, clients, and the real services (engines, S3) as plugins."""

from __future__ import annotations

import importlib.util

import pytest

pytest_plugins = [
    name
    for name in ("tests.fixtures.engines", "tests.fixtures.s3", "tests.fixtures.celery_worker")
    if importlib.util.find_spec(name) is not None  # TEMP while the fixture modules are being written
]


@pytest.fixture
def world(db, settings, tmp_path):
    from tests.factories import build_world

    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(tmp_path / "storage")
    return build_world()

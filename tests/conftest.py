"""Shared fixtures: the personas, clients, and the real services (engines, S3) as plugins."""

from __future__ import annotations

import importlib.util

import pytest

pytest_plugins = [
    name
    for name in ("tests.fixtures.engines", "tests.fixtures.s3")
    if importlib.util.find_spec(name) is not None  # TEMP while the fixture modules are being written
]

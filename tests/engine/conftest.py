"""The engine tests start from empty engines: the session's two engines are shared with the fleet
tests, which may leave adapters resident or pinned (a pin left on engine A made the pin tests
here fail with 409, no unpinned slot)."""

from __future__ import annotations

import asyncio

import pytest

from tests.workers.conftest import _empty


@pytest.fixture(autouse=True)
def _engines_emptied(request):
    if {"engines", "engine_a", "engine_b"} & set(request.fixturenames):
        for handle in request.getfixturevalue("engines"):
            if handle.is_running():
                asyncio.run(_empty(handle))

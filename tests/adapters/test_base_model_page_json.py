"""The base models page answers a config.json it cannot take with the reason, never a 500: 64 KiB
of `[` (within the page's size bound) was a RecursionError."""

from __future__ import annotations

import pytest

from adapters.models import BaseModel

pytestmark = pytest.mark.django_db


def test_a_config_nested_too_deep_is_refused_with_the_reason(world):
    before = BaseModel.objects.count()
    deep = "[" * 30_000 + "]" * 30_000
    page = world.client("adam").post("/platform/base-models/", {"name": "deep", "hf_config": deep})
    assert page.status_code < 500
    assert "nested deeper than 32 levels" in page.content.decode()
    assert BaseModel.objects.count() == before

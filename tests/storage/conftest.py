"""The `storage` fixture runs each contract test against both backends."""

from __future__ import annotations

import pytest

from adapters.storage import AdapterStorage


@pytest.fixture(params=["disk", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest) -> AdapterStorage:
    name = "disk_storage" if request.param == "disk" else "s3_storage"
    return request.getfixturevalue(name)

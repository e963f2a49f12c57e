import pytest

from tests.pages.builders import build_pages_world


@pytest.fixture
def pages(world, tmp_path):
    return build_pages_world(world, tmp_path)


@pytest.fixture
def live_pages(world, tmp_path, monkeypatch):
    """The same world for live_server tests, where commits happen: uploads would enqueue
    validation after commit, and these tests drive the pages, not the workers."""
    monkeypatch.setattr("adapters.services.uploads._enqueue_validation", lambda version_id: None)
    return build_pages_world(world, tmp_path)

import pytest

from tests.pages.builders import build_pages_world


@pytest.fixture
def pages(world, tmp_path):
    return build_pages_world(world, tmp_path)

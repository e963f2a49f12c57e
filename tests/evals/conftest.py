"""The eval tests' shared state: a validated version under a policy."""

from __future__ import annotations

import pytest

from adapters.models import AdapterVersion
from tests.api.test_lifecycle_flow import _mark_validated
from tests.evals.runs import suite_version
from tests.evals.suites import CASES, jsonl
from tests.factories import adapter_files, upload
from tests.gateway.test_releases import acme, private  # noqa: F401 - the release plans' fixtures


@pytest.fixture
def gated(world, tmp_path, settings, monkeypatch):
    """support@1 validated (bob uploaded it), suite qa, and a policy on support (alice).

    The test validates the version itself: the upload's validation task is not sent. In a
    transactional test (a browser's live server) the upload commits, and a real Celery worker
    that an earlier test of the session started would otherwise take the version first."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr("adapters.services.uploads._enqueue_validation", lambda version_id: None)
    assert (
        upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "a")).status_code
        == 201
    )
    version = _mark_validated(AdapterVersion.objects.get(adapter=world.support, number=1))
    suite = suite_version(world, jsonl(*CASES))
    response = world.client("alice").put(
        "/api/v1/tenants/acme/adapters/support/eval-policy/",
        {"suite": "qa", "min_pass_rate": 0.5, "max_regression_points": 10},
        format="json",
    )
    assert response.status_code == 200, response.json()
    return version, suite

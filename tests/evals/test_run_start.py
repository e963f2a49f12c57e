"""Starting a run: on demand (API; one at a time per suite version) and by itself when a gated
version becomes validated (after commit); refused for a version the gate does not evaluate."""

from __future__ import annotations

import pytest

from adapters.models import AdapterVersion
from evals.models import EvalRun
from evals.services import runner
from tests.api.test_lifecycle_flow import _mark_validated
from tests.evals.runs import suite_version
from tests.evals.suites import CASES, jsonl
from tests.factories import adapter_files, upload

pytestmark = pytest.mark.django_db
RUNS = "/api/v1/tenants/acme/adapters/support/versions/1/eval-runs/"


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    """The runs the services queued (no worker here: the engine tests run them)."""
    queued: list[int] = []
    monkeypatch.setattr(runner, "_enqueue", queued.append)
    return queued


def test_a_run_is_started_on_demand_once_at_a_time(
    world, gated, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first = world.client("bob").post(RUNS, {}, format="json")
    assert first.status_code == 201, first.json()
    assert first.json()["status"] == "queued" and first.json()["baseline"] == "base"
    again = world.client("bob").post(RUNS, {}, format="json")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert enqueued == [EvalRun.objects.get().pk]


def test_a_gated_version_is_evaluated_when_it_becomes_validated(
    world, tmp_path, settings, enqueued, django_capture_on_commit_callbacks
):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    suite_version(world, jsonl(*CASES))
    world.client("alice").put(
        "/api/v1/tenants/acme/adapters/support/eval-policy/", {"suite": "qa"}, format="json"
    )
    upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "a"))
    version = AdapterVersion.objects.get(adapter=world.support)
    with django_capture_on_commit_callbacks(execute=True):
        _mark_validated(version)
    run = EvalRun.objects.get(version=version)
    assert enqueued == [run.pk] and run.started_by is None and run.cases_total == len(CASES)


def test_an_ungated_or_unvalidated_version_gets_no_run(world, tmp_path, settings, enqueued):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "a"))
    uploaded = world.client("bob").post(RUNS, {}, format="json")
    assert uploaded.status_code == 409
    assert uploaded.json()["error"]["code"] == "eval_run.version_not_runnable"
    _mark_validated(AdapterVersion.objects.get(adapter=world.support))
    ungated = world.client("bob").post(RUNS, {}, format="json")
    assert ungated.status_code == 409 and ungated.json()["error"]["code"] == "eval_run.no_policy"
    assert not EvalRun.objects.exists() and not enqueued


def test_a_run_is_claimed_once_and_only_its_own_task_takes_it_up_again(world, gated, enqueued):
    run, _ = runner.run_start(version=gated[0])
    assert runner.run_claim(run.pk, "task-1") is not None
    assert runner.run_claim(run.pk, "task-2") is None  # a duplicate leaves it alone
    again = runner.run_claim(run.pk, "task-1")  # redelivered after its worker died
    assert again is not None and again.status == "running" and again.claimed_by == "task-1"
    assert runner.run_execute(run.pk, "task-2") is None

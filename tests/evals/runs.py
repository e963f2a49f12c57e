"""A finished run recorded through the run services with the answers given, for the tests of
what follows a run (the gate, the pages, the record); the runs on real engines have their own."""

from __future__ import annotations

from typing import Any

from adapters.models import AdapterVersion
from evals.models import EvalRun, EvalSuiteVersion
from evals.services.runs import run_create, run_finish, run_record_case


def finished_run(
    version: AdapterVersion, suite: EvalSuiteVersion, answers: dict[str, tuple[str, str]]
) -> EvalRun:
    """answers: case id -> (the candidate's answer, serving now's answer)."""
    run = run_create(version=version, suite_version=suite, baseline="base", engines=["cpu-1"])
    for case in suite.cases:
        candidate, baseline = answers[case["id"]]
        run_record_case(run=run, case=case, side="candidate", answer=candidate, engine="cpu-1")
        run_record_case(run=run, case=case, side="baseline", answer=baseline, engine="cpu-1")
    return run_finish(run=run)


def suite_version(world: Any, raw: bytes, name: str = "qa") -> EvalSuiteVersion:
    from adapters.access import AccessContext
    from evals.services.suites import suite_upload

    version, _ = suite_upload(
        access=AccessContext.for_user(world.users["bob"]), tenant=world.acme, name=name, raw=raw
    )
    return version


def gated_run_held_back(
    world: Any, monkeypatch: Any, tmp_path: Any, cases: list[dict], seed: int
) -> EvalRun:
    """acme/support gated on a suite of `cases`, a version uploaded and validated in process,
    and the run its validation started, left queued: nothing is enqueued (validation or run), so
    the test delivers the run to whichever worker it means to break."""
    from adapters.services import uploads
    from evals.services import runner
    from tests.api.test_lifecycle_flow import _mark_validated
    from tests.evals.suites import jsonl
    from tests.factories import adapter_files, upload

    suite_version(world, jsonl(*cases))
    answer = world.client("alice").put(
        "/api/v1/tenants/acme/adapters/support/eval-policy/", {"suite": "qa"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    monkeypatch.setattr(uploads, "_enqueue_validation", lambda version_id: None)
    monkeypatch.setattr(runner, "_enqueue", lambda run_id: None)
    upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / f"k{seed}", seed=seed))
    version = _mark_validated(AdapterVersion.objects.get(adapter=world.support, number=1))
    return EvalRun.objects.get(version=version)  # started on the validation's commit

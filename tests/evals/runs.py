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

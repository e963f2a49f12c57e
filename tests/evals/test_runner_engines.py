"""The eval runner on the real engines and the real Celery worker: a gated version's run starts by
itself when the worker validates it, asks every case of the candidate and of the active version
through the gateway's request path, and the gate refuses approval on its verdict until an
override; a worker process SIGKILLed mid-run comes back and finishes the run with each case
recorded once. The candidate is never reachable from /v1/."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import pytest

from adapters.models import AdapterVersion
from core.audit_models import AuditEvent
from engine.sample_adapters import TINY_BASE_MODEL_NAME
from evals.models import EvalCaseResult, EvalRun
from gateway.app import Gateway
from tests.evals.runs import gated_run_held_back, suite_version
from tests.evals.suites import jsonl
from tests.factories import adapter_files, upload
from tests.faults.harness import spawn_worker
from tests.faults.record import wait_until
from tests.fixtures.celery_worker import _stop
from tests.gateway.inprocess import code_of, post, token_for
from tests.workers.conftest import worker_fleet  # noqa: F401 - fixture
from tests.workers.fleet import servable_version
from workers import shared_state

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

CASES = (
    {"id": "greet", "prompt": "Say hello.", "max_tokens": 6, "expect": {"not_contains": ["@@"]}},
    {
        "id": "refund",
        "messages": [{"role": "user", "content": "Refund window?"}],
        "max_tokens": 6,
        # The tiny random model never says this: a must-pass case both sides fail.
        "expect": {"contains": ["within 30 days"]},
        "must_pass": True,
    },
    {"id": "free", "prompt": "Write a haiku.", "max_tokens": 6},
)


def _gate(world, *, judge: str = "") -> None:
    suite_version(world, jsonl(*CASES))
    body = {"suite": "qa", "min_pass_rate": 0.0, **({"judge": judge} if judge else {})}
    response = world.client("alice").put(
        "/api/v1/tenants/acme/adapters/support/eval-policy/", body, format="json"
    )
    assert response.status_code == 200, response.json()


def _finished(version: AdapterVersion, timeout: float = 240) -> EvalRun:
    def done() -> bool:
        run = EvalRun.objects.filter(version=version).first()
        return run is not None and run.status in ("finished", "failed")

    wait_until(done, timeout=timeout, what=f"a finished run of {version}")
    return EvalRun.objects.get(version=version)


async def _ask_v1(token: str, model: str) -> tuple[int, str]:
    app = Gateway()
    try:
        response = await post(
            app, token, {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        )
        return response.status_code, code_of(response)
    finally:
        await app.aclose()


def _requests_of(label: str) -> int:
    field = f"acme|support|{label}|requests"  # gateway.recorder's counters, per version
    return int(shared_state.client().hget("lp:gwm:counters", field) or 0)


def test_a_validated_version_is_evaluated_by_itself_beside_the_active_one(
    worker_fleet,  # noqa: F811 - fixture
    tmp_path,
    settings,
    otlp_receiver,
):
    world = worker_fleet.world
    active = servable_version(world.support, tmp_path, seed=801, status="active")
    _gate(world, judge=TINY_BASE_MODEL_NAME)
    asked_before = _requests_of("support@2")  # the counters outlive a test
    # The upload commits, the worker validates it, and the run starts on that commit.
    response = upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "c", seed=9))
    assert response.status_code == 201, response.json()
    candidate = AdapterVersion.objects.get(adapter=world.support, number=2)
    run = _finished(candidate)

    assert run.status == "finished", run.error
    assert run.baseline == f"support@{active.number}" and run.cases_done == len(CASES)
    rows = {(r.case_id, r.side): r for r in EvalCaseResult.objects.filter(run=run)}
    assert len(rows) == 3 * len(CASES)
    for case_id in (str(case["id"]) for case in CASES):
        for side in ("candidate", "baseline"):
            row = rows[(case_id, side)]
            assert not row.error and row.answer, (side, row.error)
            assert row.completion_tokens > 0 and row.prompt_tokens > 0 and row.latency_ms > 0
        # The judge's reply is constrained to A, B or TIE: always read, never "unreadable".
        assert rows[(case_id, "judge")].answer in ("win", "tie", "split", "loss")
    # Side by side on the API, each scorer's verdict on both sides.
    cases = world.client("alice").get(
        "/api/v1/tenants/acme/adapters/support/versions/2/eval-runs/1/cases/"
    )
    refund = next(c for c in cases.json()["cases"] if c["id"] == "refund")
    assert refund["candidate"]["verdicts"]["contains"]["passed"] is False
    assert refund["baseline"]["verdicts"]["contains"]["passed"] is False

    # The run is a span with its counts (the worker exports to the session's OTLP receiver),
    # and each case asked of the candidate is a gateway request span of the background lane.
    def run_span(spans: list[dict]) -> dict | None:
        return next(
            (
                s
                for s in spans
                if s["name"] == "lora_portal.version.eval"
                and s["attributes"].get("lora_portal.eval_run") == run.pk
                and "lora_portal.eval_run.cases_total" in s["attributes"]
            ),
            None,
        )

    assert run.started_at is not None and run.finished_at is not None
    began, ended = (int(t.timestamp() * 1e9) for t in (run.started_at, run.finished_at))

    def candidate_cases(spans: list[dict]) -> list[dict]:  # of this run (the receiver's session)
        return [
            s
            for s in spans
            if s["service"] == "lora-portal-worker"
            and began <= s["start_ns"] <= ended
            and not s["parent_span_id"]
            and s["attributes"].get("lora_portal.adapter_version") == "support@2"
            and s["attributes"].get("lora_portal.background") is True
        ]

    spans = otlp_receiver.wait_for(
        lambda spans: run_span(spans) and len(candidate_cases(spans)) >= len(CASES)
    )
    counted = run_span(spans)
    assert counted is not None
    assert counted["attributes"] | {"lora_portal.eval_run.passed": "?"} == counted["attributes"] | {
        "lora_portal.tenant": "acme",
        "lora_portal.adapter_version": "support@2",
        "lora_portal.eval_run.status": "finished",
        "lora_portal.eval_run.cases_total": len(CASES),
        "lora_portal.eval_run.cases_done": len(CASES),
        "lora_portal.eval_run.cases_scored": run.summary["scored"],
        "lora_portal.eval_run.candidate.passed": run.summary["passed"]["candidate"],
        "lora_portal.eval_run.baseline.passed": run.summary["passed"]["baseline"],
        "lora_portal.eval_run.candidate.errors": 0,
        "lora_portal.eval_run.baseline.errors": 0,
        "lora_portal.eval_run.passed": "?",
    }
    assert counted["attributes"]["lora_portal.eval_run.passed"] is run.verdict["passed"]
    cases = candidate_cases(spans)
    assert len(cases) == len(CASES)
    calls = {s["parent_span_id"] for s in spans if s["kind"] == 3}  # the engine calls
    assert all(case["span_id"] in calls for case in cases)
    assert "Refund window?" not in str(spans)  # a case's content is in no span

    # Billed to the tenant as its traffic (the runner's gateway flushes its measurements).
    assert _requests_of("support@2") - asked_before == len(CASES)

    # Held by the fleet for the run, still validated, and never on /v1/, even for its tenant.
    candidate.refresh_from_db()
    assert candidate.status == "validated" and candidate.serving_keys
    token = token_for(world.users["bob"], world.acme)
    assert asyncio.run(_ask_v1(token, "support@2")) == (404, "model_not_found")
    assert asyncio.run(_ask_v1(token, f"acme/{candidate.served_name}")) == (404, "model_not_found")

    # The must-pass case failed: refused until a second reviewer overrides.
    approve = "/api/v1/tenants/acme/adapters/support/versions/2/approve/"
    refused = world.client("rita").post(approve, {})
    assert refused.status_code == 409, refused.json()
    assert refused.json()["error"]["code"] == "version.eval_gate_failed"
    overridden = world.client("rob").post(
        approve, {"override_eval_gate": True, "reason": "wording"}, format="json"
    )
    assert overridden.status_code == 200, overridden.json()


def _pool_children(pid: int) -> list[int]:
    children: list[int] = []
    for task in os.scandir(f"/proc/{pid}/task"):
        with open(os.path.join(task.path, "children")) as f:
            children += [int(c) for c in f.read().split()]
    return children


def test_a_worker_killed_mid_run_finishes_it_with_each_case_once(
    worker_fleet,  # noqa: F811 - fixture
    tmp_path,
    monkeypatch,
    celery_worker_process,
):
    from evals.tasks import eval_run_execute

    world = worker_fleet.world
    cases = [{"id": f"c{i}", "prompt": f"Count to {i}.", "max_tokens": 12} for i in range(10)]
    # This test delivers the tasks itself: validation in process, the run to its own worker.
    run = gated_run_held_back(world, monkeypatch, tmp_path, cases, seed=11)

    queue = f"evals-{uuid.uuid4().hex[:8]}"
    proc, log = spawn_worker(
        queue,
        pool="prefork",
        concurrency=1,
        ADAPTER_STORAGE_ROOT=str(celery_worker_process["storage_root"]),
        ENGINE_QUEUE_PREFIX=f"{celery_worker_process['queue']}.node.",
        EVAL_RUN_CONCURRENCY="1",
    )
    try:
        eval_run_execute.apply_async([run.pk], queue=queue)
        wait_until(
            lambda: EvalRun.objects.get(pk=run.pk).cases_done >= 2,
            timeout=180,
            what="two cases recorded",
        )
        before = EvalRun.objects.get(pk=run.pk)
        assert before.status == "running" and before.cases_done < len(cases)
        (child,) = _pool_children(proc.pid)
        os.kill(child, signal.SIGKILL)
        killed_at = time.monotonic()
        finished = _finished(run.version)
        # The redelivered task returns (its gateway closed) before the worker stops.
        wait_until(lambda: "succeeded" in log.read_text(), timeout=60, what="the task's end")
    finally:
        _stop(proc)
    assert finished.status == "finished", (finished.error, log.read_text()[-2000:])
    assert finished.claimed_by == before.claimed_by  # the same task, delivered again
    assert finished.cases_done == len(cases)
    sides = list(EvalCaseResult.objects.filter(run=run).values_list("case_id", "side"))
    assert sorted(sides) == sorted((c["id"], s) for c in cases for s in ("candidate", "baseline"))
    assert AuditEvent.objects.filter(action="eval_run.finish", object_id=str(run.pk)).count() == 1
    assert time.monotonic() - killed_at < 180

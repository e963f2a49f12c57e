"""What the eval runner costs over the engine alone: a suite of N cases run on two versions (the
candidate and the active one) through the runner's own path, against the same 2 x N requests
sent straight to the engine at the same concurrency.

    .venv/bin/python -m bench.eval_throughput [--cases 200] [--concurrency 4] [--max-tokens 8]
        [--write-docs] [--keep-db]

One real CPU vLLM engine (engine.launcher, the tiny Llama) with two rank-8 adapters resident: the
adapter's active version and a validated candidate whose files are in the serving store (as the
runner leaves them). The run is evaluated in this process as the Celery task does it
(evals.services.runner: claim, then evals.services.asking through Gateway.serve_admitted, each
answer scored and recorded in PostgreSQL), timed from the first request to the last record.
The direct pass sends the same bodies (temperature 0, the same seed and max_tokens, streamed)
to the engine with an httpx client at the run's own bound, before and after the run (their
mean: the machine's load drifts). Ratio = direct time / run time.

Database: BENCH_EVAL_DATABASE_URL (default .../lora_portal_bench_eval; created, dropped at the
end unless --keep-db); Redis: BENCH_EVAL_REDIS_URL (default DB 10, flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from bench import gateway_support as gs
from bench.docs_section import DOCS, write_section
from engine.launcher import REPO_ROOT, EngineProcess, stop_engines

SECTION = "eval-throughput"
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_eval"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/10"
VAR = REPO_ROOT / "var" / "bench" / "eval-throughput"
GOAL_RATIO = 0.8


@dataclass
class Result:
    cases: int
    concurrency: int
    max_tokens: int
    run_s: float
    direct_s: float
    run_errors: int
    direct_errors: int
    machine: str
    commit: str
    date: str

    @property
    def ratio(self) -> float:
        return self.direct_s / self.run_s


def render(r: Result, command: str) -> str:
    requests = 2 * r.cases
    verdict = "met" if r.ratio >= GOAL_RATIO else "NOT met"
    return "\n".join(
        [
            f"<!-- {SECTION}:begin -->",
            "## Eval runner: a suite on two versions against the engine alone (issue 33)",
            "",
            f"Command: `{command}` ({r.date}, commit {r.commit}).",
            "",
            "One CPU vLLM engine (tiny Llama) with two rank-8 adapters resident, the candidate "
            f"(validated) and the active version. A {r.cases}-case suite (prompts, max_tokens "
            f"{r.max_tokens}, temperature 0, one seed) run on both through the runner's own path "
            "(the gateway's admission, engine choice and fair slots in process, every answer "
            "scored and recorded in PostgreSQL), against the same "
            f"{requests} request bodies sent straight to the engine before and after the run "
            f"(the mean of both), all at {r.concurrency} requests in flight (the run's bound, "
            "`EVAL_RUN_CONCURRENCY`, within what the live headroom leaves background requests: "
            "the engine's slots less `GATEWAY_LIVE_HEADROOM`).",
            "",
            "| path | requests | wall s | requests/s | errors |",
            "|---|---|---|---|---|",
            f"| engine alone | {requests} | {r.direct_s:.1f} | {requests / r.direct_s:.1f} | "
            f"{r.direct_errors} |",
            f"| eval run | {requests} | {r.run_s:.1f} | {requests / r.run_s:.1f} | "
            f"{r.run_errors} |",
            "",
            f"The run's throughput is **{r.ratio:.2f}x** the engine's alone (goal at least "
            f"{GOAL_RATIO}x: **{verdict}**).",
            "",
            f"Machine: {r.machine}.",
            f"<!-- {SECTION}:end -->",
        ]
    )


def seed_world(engine: EngineProcess, key: str, cases: int, max_tokens: int) -> tuple[Any, Any]:
    """The tenancy, the active version and a validated candidate (both resident), suite qa and
    the adapter's policy; returns (the run, the candidate)."""
    from adapters.access import AccessContext
    from evals.services.policies import policy_set
    from evals.services.runs import run_create
    from evals.services.suites import suite_upload
    from tests.workers.fleet import servable_version
    from workers.models import Engine

    tenancy = gs.seed_tenancy(gs.tiny_model())
    active = gs.seed_resident_adapter(engine, key, tenancy, VAR)
    candidate = servable_version(active.adapter, VAR / "src", seed=2, status="validated")
    row = Engine.objects.get(name="bench-engine")
    gs.make_resident(engine, key, row, candidate, VAR / "src" / "src-support-2")
    owner = AccessContext.for_user(tenancy.owner)
    lines = [
        {"id": f"c{i}", "prompt": f"Question {i}: say something.", "max_tokens": max_tokens}
        for i in range(cases)
    ]
    raw = "".join(json.dumps(line) + "\n" for line in lines).encode()
    suite, _ = suite_upload(access=owner, tenant=tenancy.tenant, name="qa", raw=raw)
    policy_set(access=owner, adapter=active.adapter, suite="qa")
    run = run_create(
        version=candidate,
        suite_version=suite,
        baseline=f"support@{active.number}",
        engines=[row.name],
    )
    return run, candidate


async def direct_pass(
    engine: EngineProcess, key: str, cases: list[dict[str, Any]], models: list[str], bound: int
) -> tuple[float, int]:
    """Each case to each model, straight to the engine at `bound` in flight: (seconds, errors)."""
    from evals.services.asking import _payload

    limit = asyncio.Semaphore(bound)
    errors = 0

    async def one(client: httpx.AsyncClient, case: dict[str, Any], model: str) -> None:
        nonlocal errors
        body = {**_payload(case), "model": model}
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        async with limit, client.stream("POST", path, json=body) as response:
            await response.aread()
            errors += response.status_code != 200

    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=engine.base_url, headers=headers, timeout=120) as client:
        started = time.perf_counter()
        await asyncio.gather(*(one(client, case, model) for case in cases for model in models))
        return time.perf_counter() - started, errors


def bound_of(engine: EngineProcess) -> int:
    """The run's bound on requests in flight (evals.services.asking.Asker: the setting, at most
    half the tenant's in-flight cap; the bench tenant has none), and at most what the live
    headroom leaves background requests on the engine (GATEWAY_LIVE_HEADROOM): the direct pass
    runs at the concurrency the run can reach."""
    from django.conf import settings

    slots = int(engine.config.max_num_seqs * settings.GATEWAY_ENGINE_SLOTS_FACTOR)
    return min(int(settings.EVAL_RUN_CONCURRENCY), max(1, slots - settings.GATEWAY_LIVE_HEADROOM))


def measure(args: argparse.Namespace, procs: dict[str, Any], db_url: str) -> Result:
    started_load = os.getloadavg()[0]
    key = secrets.token_hex(16)
    config = gs.engine_config(gs.tiny_model(), VAR, "engine", key, max_loras=2, max_cpu_loras=3)
    engine = procs["engine"] = EngineProcess(config).start()
    redis_url = os.environ.get("BENCH_EVAL_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys={"bench-engine": key})
    env["EVAL_RUN_CONCURRENCY"] = str(args.concurrency)
    gs.django_setup(env, db_url)
    engine.wait_ready(timeout=gs.READY_TIMEOUT_S)

    from evals.models import EvalCaseResult
    from evals.services.asking import ask_cases
    from evals.services.runner import run_claim
    from evals.services.runs import run_finish

    run, candidate = seed_world(engine, key, args.cases, args.max_tokens)
    cases = list(run.suite_version.cases)
    models = [candidate.served_name, run.version.adapter.versions.get(status="active").served_name]
    # A warm-up on the engine (its first requests compile and allocate), not timed.
    asyncio.run(direct_pass(engine, key, cases[:8], models, bound_of(engine)))
    claimed = run_claim(run.pk, "bench")
    assert claimed is not None  # a queued run, just made
    # The engine alone before and after the run (the mean of both: the machine's load drifts).
    before_s, before_errors = asyncio.run(direct_pass(engine, key, cases, models, bound_of(engine)))
    started = time.perf_counter()
    asyncio.run(ask_cases(claimed, candidate))
    bound = bound_of(engine)
    run_s = time.perf_counter() - started
    run_finish(run=claimed)
    after_s, after_errors = asyncio.run(direct_pass(engine, key, cases, models, bound))
    direct_s, direct_errors = (before_s + after_s) / 2, before_errors + after_errors
    run_errors = EvalCaseResult.objects.filter(run=run).exclude(error="").count()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT
    ).stdout.strip()
    return Result(
        cases=args.cases,
        concurrency=bound,
        max_tokens=args.max_tokens,
        run_s=run_s,
        direct_s=direct_s,
        run_errors=run_errors,
        direct_errors=direct_errors,
        machine=gs.machine_note(started_load, [engine]),
        commit=commit,
        date=time.strftime("%Y-%m-%d", time.gmtime()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument("--keep-db", action="store_true", help="leave the database to inspect")
    args = parser.parse_args()

    from bench.list_versions import drop_database

    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir(parents=True)
    db_url = os.environ.get("BENCH_EVAL_DATABASE_URL", DEFAULT_DB_URL)
    procs: dict[str, Any] = {}
    try:
        with gs.sigterm_runs_cleanup():
            result = measure(args, procs, db_url)
    finally:
        if procs.get("engine") is not None:
            stop_engines([procs["engine"]])
        if os.environ.get("DATABASE_URL") == db_url:  # measure() got as far as its database
            gs.flush_redis(os.environ["REDIS_URL"])
            if not args.keep_db:
                drop_database(db_url)
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2, default=str))
    section = render(result, " ".join([".venv/bin/python -m bench.eval_throughput", *sys.argv[1:]]))
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()

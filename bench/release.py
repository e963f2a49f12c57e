"""Release plans judged on live answers: a candidate built to fail the live checks and one equal
to the stable, each through the same plan, on the tiny model.

    .venv/bin/python -m bench.release [--plans 20] [--prompts 64] [--rate 20] [--beat 5]
        [--write-docs] [--keep-db]

One real CPU vLLM engine (engine.launcher, the tiny Llama) with three adapters loaded: the
stable (the kit's `sample-r8`), a candidate equal to it (the same files under another name) and
the marker adapter (engine.marker_adapter.write_marker_adapter: its greedy answer to any
prompt repeats one token). Every (adapter, prompt) of a pool of --prompts prompts is asked once,
greedy (temperature 0, 16 tokens): the engine's answer is then a function of the pair, so the
callers' traffic below reuses it instead of asking the engine again.

Each plan runs in this process through the portal's own code, on PostgreSQL: plan_start on the
alias (steps 5, 25, 50, 100; at least --min-samples sampled answers a side per step; no minimum
time, which is not what is measured; a --share of answers sampled; alpha 0.05, margin 0.05), then
callers' requests at --rate per second, each sent to the candidate with the step's weight, a
--share of them sampled as the gateway samples them and counted by
evals.services.live_samples.count_samples (the live checks of evals.scoring.live_checks), and the
controller's pass (evals.services.release_controller.plan_tick, the beat's) every --beat
seconds of that traffic, until the plan completes or rolls back. The live checks: the marker
banned (`not_contains`), and a length bound that the stable's own answers pass about 9 in 10
times, so the equal candidate is judged on a pass rate that has noise. Only the live-checks
guard runs (the errors and latency guards read the gateway's measurements in Redis, which this
traffic does not pass through). Seconds are the traffic's: requests / --rate, rounded up to the
controller's beat.

Database: BENCH_RELEASE_DATABASE_URL (default .../lora_portal_bench_release; created, dropped at
the end unless --keep-db); Redis: BENCH_RELEASE_REDIS_URL (default DB 11, flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from bench import gateway_support as gs
from bench.docs_section import DOCS, write_section
from engine.launcher import REPO_ROOT, EngineProcess, stop_engines
from tests.evals.live_policy import live_checks_policy

SECTION = "release-plans"
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_release"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
VAR = REPO_ROOT / "var" / "bench" / "release"
STEPS = [5, 25, 50, 100]
MAX_TOKENS = 16
STABLE_PASS_SHARE = 0.9  # the length bound is set where the stable passes about this share


@dataclass
class PlanRun:
    candidate: str
    seed: int
    outcome: str
    requests: int
    seconds: float
    sampled: dict[str, int]
    steps_reached: int
    reason: str


@dataclass
class Result:
    prompts: int
    rate: float
    beat: float
    share: float
    min_samples: int
    alpha: float
    max_chars: int
    stable_pass_rate: float
    bad_pass_rate: float
    engine_requests: int
    engine_seconds: float
    bad: list[PlanRun] = field(default_factory=list)
    equal: list[PlanRun] = field(default_factory=list)
    machine: str = ""
    commit: str = ""
    date: str = ""


def prompts(n: int) -> list[str]:
    topics = ["refund", "delivery", "password", "invoice", "upgrade", "warranty", "address", "bug"]
    forms = [
        "How do I get help with my {t}?",
        "My {t} is wrong, what now?",
        "Explain the {t} policy in one line.",
        "Can you check the {t} for order {n}?",
        "Write a short, polite reply about a {t}.",
        "{t}? {n}",
        "Tell me about {t} number {n} please",
        "Is there a fee for the {t}?",
    ]
    return [
        forms[i % len(forms)].format(t=topics[(i // len(forms)) % len(topics)], n=1000 + 7 * i)
        for i in range(n)
    ]


async def ask_all(
    engine: EngineProcess, key: str, models: list[str], pool: list[str]
) -> tuple[dict[tuple[str, int], str], float]:
    """Every (model, prompt) once, greedy: their reply bodies, and the seconds it took."""
    limit = asyncio.Semaphore(4)
    bodies: dict[tuple[str, int], str] = {}

    async def one(client: httpx.AsyncClient, model: str, i: int) -> None:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": pool[i]}],
            "temperature": 0,
            "max_tokens": MAX_TOKENS,
        }
        async with limit:
            response = await client.post("/v1/chat/completions", json=body)
        response.raise_for_status()
        bodies[(model, i)] = response.text

    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=engine.base_url, headers=headers, timeout=120) as client:
        started = time.perf_counter()
        await asyncio.gather(*(one(client, m, i) for m in models for i in range(len(pool))))
        return bodies, time.perf_counter() - started


def synthetic_answers(
    models: list[str], pool: list[str], marker: str
) -> dict[tuple[str, int], str]:
    def body(text: str) -> str:
        return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})

    rng = random.Random(7)
    texts = [" ".join("word" for _ in range(rng.randint(3, 12))) for _ in pool]
    return {
        (m, i): body(marker * 5 if m == "bench-bad" else texts[i])
        for m in models
        for i in range(len(pool))
    }


def seed_world(tenancy: gs.Tenancy) -> dict[str, Any]:
    """The adapter `support` with three active versions (stable @1, equal @2, marker @3) and
    the alias `bot` on @1."""
    import hashlib

    from adapters.access import AccessContext
    from adapters.models import Adapter, AdapterVersion
    from adapters.services.aliases import alias_set

    adapter = Adapter.objects.create(tenant=tenancy.tenant, name="support", base_model=tenancy.base)
    versions = {}
    for number, role in ((1, "stable"), (2, "equal"), (3, "bad")):
        digest = hashlib.sha256(f"bench-release-{number}".encode()).hexdigest()
        versions[role] = AdapterVersion.objects.create(
            tenant=tenancy.tenant,
            adapter=adapter,
            number=number,
            status="active",
            served_name=f"bench--support--v{number}-{digest[:8]}",
            manifest_sha256=digest,
            rank=8,
        )
    alias_set(
        access=AccessContext.for_user(tenancy.owner),
        tenant=tenancy.tenant,
        name="bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    return {"adapter": adapter, "versions": versions}


def run_plan(
    *,
    world: dict[str, Any],
    tenancy: gs.Tenancy,
    role: str,
    seed: int,
    bodies: dict[str, list[str]],
    args: argparse.Namespace,
) -> PlanRun:
    """One plan from start to its end (or --max-requests), as described in the module's doc."""
    from adapters.access import AccessContext
    from adapters.models import Alias
    from adapters.services.aliases import alias_set
    from evals.models import ReleasePlan
    from evals.services import live_samples, release_controller, release_plans

    alias = Alias.objects.get(tenant=tenancy.tenant, name="bot")
    owner = AccessContext.for_user(tenancy.owner)
    stable, candidate = world["versions"]["stable"], world["versions"][role]
    plan = release_plans.plan_start(
        access=owner,
        alias=alias,
        candidate=f"support@{candidate.number}",
        steps=STEPS,
        min_step_seconds=0,
        min_step_samples=args.min_samples,
        sample_share=args.share,
        alpha=args.alpha,
        margin=args.margin,
    )
    rng = random.Random(seed)
    per_beat = max(1, round(args.rate * args.beat))
    requests = 0
    sampled = {"stable": 0, "candidate": 0}
    while True:
        plan.refresh_from_db()
        if plan.status not in ("running", "paused") or requests >= args.max_requests:
            break
        weight = plan.steps[plan.current_step]
        batch = []
        for _ in range(per_beat):
            requests += 1
            side = "candidate" if rng.random() * 100 < weight else "stable"
            if rng.random() >= args.share:
                continue
            version = candidate if side == "candidate" else stable
            prompt = rng.randrange(len(bodies[role]))
            answer = bodies[role if side == "candidate" else "stable"][prompt]
            sampled[side] += 1
            batch.append(
                {"alias_id": alias.pk, "version_id": version.pk, "body": answer, "at": time.time()}
            )
        live_samples.count_samples(batch)
        release_controller.plan_tick(plan.pk, client=None, now=time.time())
    plan = ReleasePlan.objects.get(pk=plan.pk)
    if plan.status == "running":  # --max-requests reached: end it so the next plan may start
        release_plans.plan_rollback(access=owner, plan=plan, reason="bench: request cap")
        outcome = "unfinished"
    else:
        outcome = str(plan.status)
    # The next plan starts from the stable alone.
    alias_set(
        access=owner,
        tenant=tenancy.tenant,
        name="bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    beats = math.ceil(requests / per_beat)
    return PlanRun(
        candidate=role,
        seed=seed,
        outcome=outcome,
        requests=requests,
        seconds=beats * args.beat,
        sampled=sampled,
        steps_reached=plan.current_step,
        reason=plan.reason,
    )


def measure(args: argparse.Namespace, procs: dict[str, Any], db_url: str) -> Result:
    from engine.marker_adapter import marker_of, write_marker_adapter
    from engine.sample_adapters import write_lora_adapter

    started_load = os.getloadavg()[0]
    key = secrets.token_hex(16)
    tiny = gs.tiny_model()
    config = gs.engine_config(tiny, VAR, "engine", key, max_loras=3, max_cpu_loras=3)
    engine = None
    if not args.synthetic:
        engine = procs["engine"] = EngineProcess(config).start()
    root = VAR / "adapters"
    stable_dir = write_lora_adapter(
        root / "stable", rank=8, target_modules=("q_proj", "v_proj"), seed=8
    )
    shutil.copytree(stable_dir, root / "equal")
    write_marker_adapter(root / "bad", base_dir=tiny / "base")
    redis_url = os.environ.get("BENCH_RELEASE_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys={"bench-engine": key})
    gs.django_setup(env, db_url)
    if engine is not None:
        engine.wait_ready(timeout=gs.READY_TIMEOUT_S)

    from evals.scoring.live_checks import passes
    from evals.services.live_samples import answer_text
    from workers.vllm_client import VLLMClient

    async def load(engine: EngineProcess) -> None:
        async with VLLMClient(engine.base_url, engine_key=key, timeout=120) as client:
            for role in ("stable", "equal", "bad"):
                await client.load_adapter(f"bench-{role}", str((root / role).resolve()))

    pool = prompts(args.prompts)
    models = [f"bench-{r}" for r in ("stable", "equal", "bad")]
    if engine is not None:
        asyncio.run(load(engine))
        asked, engine_s = asyncio.run(ask_all(engine, key, models, pool))
    else:  # --synthetic: made-up answers, to check the bench itself (never for the docs)
        asked, engine_s = synthetic_answers(models, pool, marker_of(tiny / "base")), 0.0
    bodies = {
        r: [asked[(f"bench-{r}", i)] for i in range(len(pool))] for r in ("stable", "equal", "bad")
    }
    marker = marker_of(tiny / "base")
    lengths = sorted(len(answer_text(b) or "") for b in bodies["stable"])
    max_chars = lengths[min(len(lengths) - 1, int(STABLE_PASS_SHARE * len(lengths)))]
    checks = {"not_contains": [marker], "max_chars": max_chars}

    def rate(role: str) -> float:
        return sum(passes(answer_text(b) or "", checks) for b in bodies[role]) / len(pool)

    tenancy = gs.seed_tenancy(tiny)
    world = seed_world(tenancy)
    live_checks_policy(tenant=tenancy.tenant, adapter=world["adapter"], checks=checks)
    result = Result(
        prompts=len(pool),
        rate=args.rate,
        beat=args.beat,
        share=args.share,
        min_samples=args.min_samples,
        alpha=args.alpha,
        max_chars=max_chars,
        stable_pass_rate=rate("stable"),
        bad_pass_rate=rate("bad"),
        engine_requests=len(asked),
        engine_seconds=engine_s,
    )
    for i in range(args.bad_plans):
        result.bad.append(
            run_plan(
                world=world, tenancy=tenancy, role="bad", seed=1000 + i, bodies=bodies, args=args
            )
        )
    for i in range(args.plans):
        result.equal.append(
            run_plan(world=world, tenancy=tenancy, role="equal", seed=i, bodies=bodies, args=args)
        )
    result.machine = gs.machine_note(started_load, [engine] if engine else [])
    result.commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT
    ).stdout.strip()
    result.date = time.strftime("%Y-%m-%d", time.gmtime())
    return result


def render(r: Result, command: str) -> str:
    bad_rolled = [p for p in r.bad if p.outcome == "rolled_back"]
    false = [p for p in r.equal if p.outcome == "rolled_back"]
    completed = [p for p in r.equal if p.outcome == "completed"]
    unfinished = [p for p in r.equal if p.outcome == "unfinished"]
    bad_lines = [
        f"| bad #{i + 1} | {p.outcome} at step {p.steps_reached} ({STEPS[p.steps_reached]} %) | "
        f"{p.requests} | {p.seconds:.0f} | {p.sampled['candidate']} / {p.sampled['stable']} |"
        for i, p in enumerate(r.bad)
    ]
    equal_requests = sorted(p.requests for p in r.equal) or [0]
    lines = [
        f"<!-- {SECTION}:begin -->",
        "## Release plans: a candidate built to fail the live checks, and one equal to the stable (issue 45)",
        "",
        f"Command: `{command}` (`make bench-release`; {r.date}, commit {r.commit}).",
        "",
        "One CPU vLLM engine (tiny Llama) with the stable (`sample-r8`), an equal candidate (the "
        "same files under another name) and the marker adapter (engine/marker_adapter.py) "
        "loaded. Every (adapter, "
        f"prompt) of {r.prompts} prompts asked once, greedy, {MAX_TOKENS} tokens "
        f"({r.engine_requests} engine requests in {r.engine_seconds:.1f} s); the callers' "
        "traffic reuses those answers (greedy: an answer is a function of the pair). Each plan "
        "runs the portal's own plan_start, live_samples.count_samples and the controller's "
        f"plan_tick on PostgreSQL: steps {', '.join(map(str, STEPS))} %, at least "
        f"{r.min_samples} sampled answers a side per step, {r.share:.0%} of answers sampled, "
        f"alpha {r.alpha}, callers at {r.rate:g} requests/s, the controller every {r.beat:g} s "
        "of that traffic (seconds below are the traffic's, not timed). Live checks: the marker "
        f"banned, and at most {r.max_chars} characters (the stable passes "
        f"{r.stable_pass_rate:.0%} of the pool; the marker adapter {r.bad_pass_rate:.0%}).",
        "",
        "| plan | outcome | requests | seconds | sampled (candidate / stable) |",
        "|---|---|---|---|---|",
        *bad_lines,
        "",
        f"The bad candidate: rolled back in {len(bad_rolled)} of {len(r.bad)} plans. "
        f"The equal candidate over {len(r.equal)} plans: {len(completed)} completed, "
        f"**{len(false)} rolled back** (false rollbacks; the stated rate is at most "
        f"alpha = {r.alpha} per plan, {r.alpha * len(r.equal):.1f} expected at most over "
        f"{len(r.equal)}), {len(unfinished)} not finished within the request cap; requests per "
        f"plan {equal_requests[0]}-{equal_requests[-1]} (median "
        f"{equal_requests[len(equal_requests) // 2]}).",
        "",
        f"Machine: {r.machine}.",
        f"<!-- {SECTION}:end -->",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--plans", type=int, default=20, help="plans of the equal candidate")
    parser.add_argument("--bad-plans", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--rate", type=float, default=100.0, help="callers' requests per second")
    parser.add_argument(
        "--beat", type=float, default=10.0, help="seconds between controller passes"
    )
    parser.add_argument("--share", type=float, default=0.10)
    parser.add_argument("--min-samples", type=int, default=50)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--max-requests", type=int, default=400_000)
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument(
        "--synthetic", action="store_true", help="no engine: made-up answers (checks the bench)"
    )
    parser.add_argument("--keep-db", action="store_true", help="leave the database to inspect")
    args = parser.parse_args()
    if args.synthetic and args.write_docs:
        parser.error("--synthetic answers are not a measurement: no --write-docs")

    from bench.list_versions import drop_database

    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir(parents=True)
    db_url = os.environ.get("BENCH_RELEASE_DATABASE_URL", DEFAULT_DB_URL)
    procs: dict[str, Any] = {}
    try:
        with gs.sigterm_runs_cleanup():
            result = measure(args, procs, db_url)
    finally:
        if procs.get("engine") is not None:
            stop_engines([procs["engine"]])
        if os.environ.get("DATABASE_URL") == db_url:
            gs.flush_redis(os.environ["REDIS_URL"])
            if not args.keep_db:
                drop_database(db_url)
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2, default=str))
    section = render(result, " ".join([".venv/bin/python -m bench.release", *sys.argv[1:]]))
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()

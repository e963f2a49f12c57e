"""Budgets under concurrency: 64 concurrent streaming requests with mixed max_tokens, spread over
two gateway replicas, against a tenant budget that holds about a tenth of their worst cases.

    .venv/bin/python -m bench.budget_overshoot [--requests 64] [--share 0.1] [--write-docs]
        [--keep-db]

One real CPU vLLM engine (the tiny Llama), two gateway processes (portal.asgi under uvicorn, as
deployed) sharing one Redis and PostgreSQL. Every request is a stream with usage, max_tokens one
of 4, 8, 16 or 32 in turn, sent at once (a thread each), to the replicas in turn. Each request's
worst case is computed by the gateway's own code (gateway.request_schema.check_request and
gateway.budgets.worst_case); the budget holds `share` of their sum.

Reported: what the engine delivered to the served requests (their usage chunks) against the
budget (over = tokens above it; goal 0), the spend persisted in PostgreSQL and the count left in
Redis (both must equal what was delivered), and the refused requests that would have fit in the
room the budget still had once every served request settled (goal: none, within one request's
worst case).

Database: BENCH_BUDGETS_DATABASE_URL (default .../lora_portal_bench_budgets; created, dropped at
the end unless --keep-db); Redis: BENCH_BUDGETS_REDIS_URL (default DB 11, flushed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from bench import gateway_support as gs
from bench.docs_section import DOCS, write_section
from engine.launcher import REPO_ROOT, stop_engines

SECTION = "budget-overshoot"
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_budgets"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
VAR = REPO_ROOT / "var" / "bench" / "budget-overshoot"
SIZES = (4, 8, 16, 32)
REPLICAS = 2


@dataclass
class Answer:
    replica: int
    max_tokens: int
    worst: int
    status: int
    code: str = ""
    tokens: int = 0  # prompt + completion, from the usage chunk


@dataclass
class Result:
    requests: int
    limit: int
    worst_total: int
    persisted: int
    redis_used: int
    redis_reserved: int
    wall_s: float
    machine: str
    commit: str
    date: str
    answers: list[Answer] = field(default_factory=list)

    @property
    def served(self) -> list[Answer]:
        return [a for a in self.answers if a.status == 200]

    @property
    def refused(self) -> list[Answer]:
        return [a for a in self.answers if a.status == 429 and a.code == "budget_exceeded"]

    @property
    def used(self) -> int:
        return sum(a.tokens for a in self.served)

    @property
    def room_left(self) -> int:
        return self.limit - self.used

    @property
    def refused_that_fit(self) -> list[Answer]:
        return [a for a in self.refused if a.worst <= self.room_left]


def _body(max_tokens: int, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def worst_of(body: dict[str, Any]) -> int:
    """The request's reservation, by the gateway's own code (weights 1: no price card)."""
    from budgets.rules import UNWEIGHTED
    from gateway.budgets import worst_case
    from gateway.request_schema import Plan, check_request

    roomy = Plan(
        max_n=16,
        max_prompts=16,
        max_tokens=4096,
        max_logprobs=20,
        max_prompt_logprobs=20,
        max_prompt_bytes=1 << 20,
        max_structured_output_bytes=1 << 16,
    )
    return worst_case(check_request("chat", body, roomy), UNWEIGHTED)


def send(base: str, replica: int, key: str, body: dict[str, Any], worst: int) -> Answer:
    answer = Answer(replica=replica, max_tokens=body["max_tokens"], worst=worst, status=0)
    headers = {"authorization": f"Bearer {key}"}
    with (
        httpx.Client(timeout=300) as client,
        client.stream("POST", base + "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        answer.status = r.status_code
        if r.status_code != 200:
            answer.code = json.loads(r.read())["error"]["code"]
            return answer
        for line in r.iter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    answer.tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    return answer


def settled_spend(budget: Any, expected: int, timeout: float = 60.0) -> int:
    """The spend the gateways persisted, once it reaches `expected` (or the bound passes)."""
    from budgets.models import BudgetSpend

    deadline = time.monotonic() + timeout
    while True:
        row = BudgetSpend.objects.filter(budget=budget).first()
        persisted = row.tokens if row else 0
        if persisted == expected or time.monotonic() > deadline:
            return persisted
        time.sleep(0.1)


def redis_counts(budget: Any) -> tuple[int, int]:
    from workers import shared_state
    from workers.redis_contract.keys import budget_key

    client = shared_state.client()
    keys = client.keys(budget_key(budget.id, 0).rsplit(":", 1)[0] + ":*")
    used = reserved = 0
    for key in keys:
        raw = client.hmget(key, ["used", "reserved"])
        used += int(raw[0] or 0)
        reserved += int(raw[1] or 0)
    return used, reserved


def measure(args: argparse.Namespace, procs: dict[str, Any], db_url: str) -> Result:
    tiny = gs.tiny_model()
    engines, keys = gs.start_engines(tiny, VAR, ["budget-engine"], max_loras=2, max_cpu_loras=2)
    procs["engines"] = list(engines.values())
    redis_url = os.environ.get("BENCH_BUDGETS_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys=keys)
    gs.django_setup(env, db_url)
    for proc in engines.values():
        proc.wait_ready(timeout=gs.READY_TIMEOUT_S)

    from budgets.models import Budget
    from budgets.rebuild import rebuild_counts

    tenancy = gs.seed_tenancy(tiny)
    for name, proc in engines.items():
        gs.engine_row(name, proc, tenancy.base)
    model = tenancy.base.name
    bodies = [_body(SIZES[i % len(SIZES)], model) for i in range(args.requests)]
    worsts = [worst_of(b) for b in bodies]
    limit = int(sum(worsts) * args.share)
    budget = Budget.objects.create(
        tenant=tenancy.tenant, scope="tenant", tokens=limit, window="day"
    )
    rebuild_counts()
    bases = []
    for i in range(REPLICAS):
        gateway, base = gs.start_gateway(env, VAR / f"gateway-{i}.log", cpus=None)
        procs[f"gateway-{i}"] = gateway
        bases.append(base)
    # The engine warmed straight (nothing spent): the first compiled pass is not the budget's.
    engine = next(iter(engines.values()))
    warm = {**_body(8, "tiny-llama"), "stream": False}
    warm.pop("stream_options")
    httpx.post(
        engine.base_url + "/v1/chat/completions",
        json=warm,
        headers={"authorization": f"Bearer {keys['budget-engine']}"},
        timeout=300,
    ).raise_for_status()
    started_load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.requests) as pool:
        answers = list(
            pool.map(
                lambda i: send(
                    bases[i % REPLICAS], i % REPLICAS, tenancy.token, bodies[i], worsts[i]
                ),
                range(args.requests),
            )
        )
    wall = time.perf_counter() - t0
    used = sum(a.tokens for a in answers if a.status == 200)
    persisted = settled_spend(budget, used)
    redis_used, redis_reserved = redis_counts(budget)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return Result(
        requests=args.requests,
        limit=limit,
        worst_total=sum(worsts),
        persisted=persisted,
        redis_used=redis_used,
        redis_reserved=redis_reserved,
        wall_s=wall,
        machine=gs.machine_note(started_load, procs["engines"]),
        commit=commit,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        answers=answers,
    )


def render(r: Result, command: str) -> str:
    others = [a for a in r.answers if a not in r.served and a not in r.refused]
    over = max(0, r.used - r.limit)
    fit = r.refused_that_fit
    smallest = min((a.worst for a in r.refused), default=0)
    return "\n".join(
        [
            f"<!-- {SECTION}:begin -->",
            "## Budgets under concurrency: never overshot (`make bench-budgets`)",
            "",
            f"Command: `{command}` ({r.date}, commit {r.commit}). {r.machine}.",
            "",
            f"One CPU vLLM engine (tiny Llama), {REPLICAS} gateway processes on one Redis and "
            f"PostgreSQL. {r.requests} streaming requests sent at once, to the replicas in turn, "
            f"max_tokens {', '.join(map(str, SIZES))} in turn; their worst cases (the gateway's "
            f"own reservation) sum to {r.worst_total} tokens, and the tenant's day budget holds "
            f"{r.limit}. All answered in {r.wall_s:.1f} s.",
            "",
            "| measure | value | goal |",
            "|---|---|---|",
            f"| served / refused `budget_exceeded` / other | {len(r.served)} / {len(r.refused)} "
            f"/ {len(others)} | other 0 |",
            f"| tokens delivered to served requests (usage chunks) | {r.used} of {r.limit} | "
            f"<= {r.limit} |",
            f"| tokens over the budget | {over} | 0 |",
            f"| spend persisted in PostgreSQL / counted in Redis / still reserved | "
            f"{r.persisted} / {r.redis_used} / {r.redis_reserved} | {r.used} / {r.used} / 0 |",
            f"| room left once every served request settled | {r.room_left} | - |",
            f"| refused requests that would have fit in that room (smallest refused worst case "
            f"{smallest}) | {len(fit)} | 0, within one request's worst case |",
            "",
            "A request reserves its worst case (prompt bytes plus the chat template's allowance, "
            "plus max_tokens) in the admission script, atomically with the other checks, so the "
            "replicas together can never hold more than the budget; the end of each request "
            "gives back what the engine did not generate. A request refused while others still "
            "held their worst cases may have fit after they settled: that is the price of never "
            "going over, and the last row counts it.",
            "",
            f"<!-- {SECTION}:end -->",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument(
        "--share", type=float, default=0.1, help="the budget: this share of worst cases"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument("--keep-db", action="store_true", help="leave the database to inspect")
    args = parser.parse_args()

    db_url = os.environ.get("BENCH_BUDGETS_DATABASE_URL", DEFAULT_DB_URL)
    procs: dict[str, Any] = {}

    def stop_all() -> None:
        for name, proc in procs.items():
            if name.startswith("gateway"):
                gs.stop_group(proc)
        stop_engines(list(procs.get("engines", [])))

    result = gs.measure_and_clean_up(
        VAR,
        db_url,
        keep_db=args.keep_db,
        measure=lambda: measure(args, procs, db_url),
        stop_all=stop_all,
    )
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2, default=str))
    section = render(
        result, " ".join([".venv/bin/python -m bench.budget_overshoot", *sys.argv[1:]])
    )
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()

"""Service classes through real engines and two gateway replicas: the replay of bench/classes.py
(the simulator) on the software itself.

    .venv/bin/python -m bench.classes_real [--loads 1.0,1.5,2.0] [--phase-seconds 30]
        [--mix 2,3,5] [--seed 46] [--write-docs] [--keep-db]

Two CPU vLLM engines (tiny Llama, 8 sequences each, `--scheduling-policy priority`, each
engine's whole process tree pinned to a core of its own), one Celery worker (the fleet's cold
loads), and four gateway processes (portal.asgi under uvicorn) on one PostgreSQL and one Redis:
two replicas with service classes on, two with them off (GATEWAY_SERVICE_CLASSES=0: round-robin
between tenants, engines first come first served). Three tenants, gold, silver and bronze, each
with a hot adapter (resident on both engines, called through an alias) and 8 cold ones (active,
in the serving store, loaded by the fleet when a request needs one), and budgets on every scope
(tenant, token, alias). A fourth tenant, `capped` (bronze), sends a steady trickle on three
paths whose budgets bind during the run: its token's, its alias's, then its tenant's.

First the capacity: closed loop, as many streams at once as the engines have sequences, hot
adapters only, through the classes-off replicas (requests/s the two engines serve). Then gold's
own part of the 1.0x trace alone (classes on: the reference), and for each load the same seeded
trace (bench.classes.trace: Poisson arrivals split by the mix, 10% cold) at that multiple of the
capacity, classes off and on in turn (ABBA over the loads), the requests to the two replicas in
turn. Every request is a stream of MAX_TOKENS tokens (ignore_eos) with its usage; TTFT is measured
at the client (send to the first event carrying text), so it holds every wait: the gateway's
queue, a cold load, the engine's own queue. Goodput: tokens of answers whose TTFT was within
their class's `max_queue_wait_ms`. After the run, every budget's settled spend (PostgreSQL), its
count in Redis and what the answers' usage delivered in its scope, against its limit.

Database: BENCH_CLASSES_DATABASE_URL (default .../lora_portal_bench_classes; created, dropped at
the end unless --keep-db); Redis: BENCH_CLASSES_REDIS_URL (default DB 11, flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import gateway_support as gs
from bench.classes import trace
from bench.docs_section import add_report_arguments, write_section
from engine.launcher import REPO_ROOT, EngineProcess, stop_engines
from gateway.class_policy import DEFAULT_PLANS, plans_by_name

SECTION = "bench-classes-real"
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_classes"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
VAR = REPO_ROOT / "var" / "bench" / "classes-real"
QUEUE = "bench-classes"
ENGINE_NAMES = ("cls-a", "cls-b")
MAX_LORAS, MAX_CPU_LORAS = 4, 8
CLASSES = ("gold", "silver", "bronze")
PLANS = plans_by_name(DEFAULT_PLANS)
COLD_ADAPTERS = 8  # per tenant
MAX_TOKENS = 32
PROMPT = "Tell me about tea."
HOT_ALIAS = "hot-bot"
BUDGET_S = 30.0  # the gateways' GATEWAY_REQUEST_TIMEOUT_SECONDS (the simulator's time budget)
CAPACITY_SECONDS = 15.0
WARM_SECONDS = 5.0
TAIL_S = 90.0  # a phase's answers after its last arrival; past it a request is an error
# The capped tenant: a trickle on three paths, each bound by a budget of another scope.
CAPPED_RATE = 1.0  # requests a second, in every load phase
CAPPED_PATHS = ("token", "alias", "tenant")
CAPPED_WORST_CASES = {"token": 10, "alias": 10, "tenant": 40}  # budget = this many worst cases
MAIN_BUDGET_TOKENS = 10**9  # the three class tenants' budgets: checked on every request


@dataclass(frozen=True)
class Planned:
    at: float
    tenant: str
    klass: str
    model: str
    token: str
    cold: bool
    path: str = ""  # the capped tenant's path


@dataclass
class Answer:
    tenant: str
    klass: str
    cold: bool
    path: str
    status: int
    code: str = ""
    ttft_ms: float | None = None
    tokens: int = 0  # completion tokens (usage)
    prompt_tokens: int = 0


@dataclass
class Phase:
    name: str  # "gold alone", "1.0x off", ...
    load: float
    classes_on: bool
    rate: float
    seconds: float
    answers: list[Answer] = field(default_factory=list)
    # The fleet's adapter loads in the phase (FleetAction rows): by the loaded version's class.
    loads: dict[str, int] = field(default_factory=dict)
    load_ms_p50: float | None = None
    load_ms_max: float | None = None
    evictions: int = 0
    # Where the time went: the machine's CPU busy share (/proc/stat) and the CPU seconds of the
    # phase's two gateway replicas while it ran; the engines' own mean TTFT and queue time (their
    # /metrics histograms), every class together.
    cpu_busy: float | None = None
    gateway_cpu_s: float | None = None
    engine_ttft_ms: float | None = None
    engine_queue_ms: float | None = None
    # Replicas whose lease lapsed (another gave their holds back), from every gateway's log.
    lapses: int | None = None
    # The gateways' own count of requests held for their class's share (gateway.limits'
    # CLASSES_KEY): how many and the seconds they waited, by class; and the load generator's CPU.
    held: dict[str, float] = field(default_factory=dict)
    client_cpu_s: float | None = None


@dataclass
class BudgetRow:
    tenant: str
    scope: str
    limit: int
    persisted: int
    redis_used: int
    redis_reserved: int
    delivered: int  # prompt + completion tokens of the answers in its scope
    refused: int  # 429 budget_exceeded answers on the paths it binds (capped tenant)

    @property
    def over(self) -> int:
        """Tokens delivered in the scope beyond the limit (the goal: 0)."""
        return max(0, self.delivered - self.limit)

    @property
    def counted_over(self) -> int:
        """What the budget's counts (PostgreSQL, Redis) hold beyond the limit."""
        return max(0, max(self.persisted, self.redis_used) - self.limit)


@dataclass
class Result:
    started_at: str
    commit: str
    machine: str
    mix: list[float]
    seed: int
    phase_seconds: float
    headroom: int
    capacity_rps: float
    capacity_tokens_s: float
    slots: int
    phases: list[Phase] = field(default_factory=list)
    budgets: list[BudgetRow] = field(default_factory=list)
    seconds: float = 0.0
    warm_answers: list[Answer] = field(default_factory=list)  # warm-up and capacity
    cold: bool = True  # the trace's cold requests go to cold adapters (else hot, as the rest)
    engine_nice: int = 0


# --- the traffic ---------------------------------------------------------------------------


def body_for(model: str) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


async def send(client: httpx.AsyncClient, base: str, p: Planned, body: bytes) -> Answer:
    """One stream; TTFT at the first event carrying text, tokens from the usage chunk."""
    answer = Answer(p.tenant, p.klass, p.cold, p.path, status=0)
    headers = {"authorization": f"Bearer {p.token}", "content-type": "application/json"}
    started = time.perf_counter()
    try:
        async with client.stream(
            "POST", base + "/v1/chat/completions", content=body, headers=headers
        ) as response:
            answer.status = response.status_code
            if response.status_code != 200:
                data = await response.aread()
                try:
                    answer.code = orjson.loads(data)["error"]["code"]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    answer.code = data[:120].decode(errors="replace")
                return answer
            buffer = b""
            async for chunk in response.aiter_raw():
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    if answer.ttft_ms is None and gs.first_token_at(event):
                        answer.ttft_ms = (time.perf_counter() - started) * 1000
                    if b'"usage"' in event and event.startswith(b"data: {"):
                        usage = orjson.loads(event[6:]).get("usage") or {}
                        answer.tokens = int(usage.get("completion_tokens") or 0)
                        answer.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            if answer.ttft_ms is None:
                answer.code = "no token"
    except httpx.HTTPError as exc:
        answer.code = type(exc).__name__
    return answer


async def replay(plan: list[Planned], replicas: list[str]) -> list[Answer]:
    """Open loop: each request leaves at its time whatever happened to the others, to the
    replicas in turn."""
    bodies = {model: body_for(model) for model in {p.model for p in plan}}
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=512)
    timeout = httpx.Timeout(BUDGET_S + TAIL_S, connect=10.0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        started = time.perf_counter()

        async def one(i: int, p: Planned) -> Answer:
            await asyncio.sleep(max(0.0, p.at - (time.perf_counter() - started)))
            return await send(client, replicas[i % len(replicas)], p, bodies[p.model])

        tasks = [asyncio.create_task(one(i, p)) for i, p in enumerate(plan)]
        last = plan[-1].at if plan else 0.0
        done, pending = await asyncio.wait(tasks, timeout=last + TAIL_S)
        for task in pending:
            task.cancel()
        return [
            t.result()
            if t in done
            else Answer(p.tenant, p.klass, p.cold, p.path, 0, code="replay deadline")
            for t, p in zip(tasks, plan, strict=True)
        ]


async def closed_loop(
    models: list[tuple[str, str, str]], replicas: list[str], concurrency: int, seconds: float
) -> tuple[list[Answer], float]:
    """`concurrency` streams at once, each sent as the previous one ends, for `seconds`."""
    answers: list[Answer] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=BUDGET_S + TAIL_S, limits=limits) as client:
        started = time.perf_counter()

        async def worker(k: int) -> None:
            i = k
            while time.perf_counter() - started < seconds:
                tenant, model, token = models[i % len(models)]
                p = Planned(0.0, tenant, tenant, model, token, False)
                answers.append(await send(client, replicas[i % len(replicas)], p, body_for(model)))
                i += concurrency

        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        return answers, time.perf_counter() - started


# --- the world -----------------------------------------------------------------------------


@dataclass
class TenantWorld:
    slug: str
    klass: str
    tokens: dict[str, str]  # name -> plaintext
    cold: list[str]  # model names of the cold versions


def _tenant(slug: str, klass: str) -> tuple[Any, Any]:
    from django.contrib.auth import get_user_model

    from tenants.models import Membership, Tenant

    tenant = Tenant.objects.create(
        slug=slug,
        name=slug.title(),
        slo_class=klass,
        quota_requests_per_minute=2_000_000_000,
        max_in_flight_requests=100_000,
        max_adapter_concurrency=100_000,
    )
    owner = get_user_model().objects.create_user(username=f"owner-{slug}")
    Membership.objects.create(user=owner, tenant=tenant, role="owner")
    return tenant, owner


def _hot(
    tenant: Any,
    owner: Any,
    base: Any,
    engines: dict[str, EngineProcess],
    keys: dict[str, str],
    rows: dict[str, Any],
    seed: int,
    aliases: tuple[str, ...],
) -> None:
    """The tenant's hot adapter, resident on both engines, and its aliases on it."""
    from adapters.access import AccessContext
    from adapters.models import Adapter
    from adapters.services.aliases import alias_set
    from tests.workers.fleet import servable_version

    adapter = Adapter.objects.create(
        tenant=tenant, name="hot", base_model=base, max_concurrent_requests=100_000
    )
    src = VAR / "src" / tenant.slug
    version = servable_version(adapter, src, seed=seed)
    for name, proc in engines.items():
        gs.make_resident(proc, keys[name], rows[name], version, src / f"src-hot-{seed}")
    for alias in aliases:
        alias_set(
            access=AccessContext.for_user(owner),
            tenant=tenant,
            name=alias,
            targets=[{"version": f"hot@{version.number}", "weight": 100}],
        )


def _budget(tenant: Any, scope: str, tokens: int) -> None:
    from budgets.models import Budget

    Budget.objects.create(tenant=tenant, scope=scope, tokens=tokens, window="day")


def seed_world(
    engines: dict[str, EngineProcess], keys: dict[str, str], tiny: Path
) -> tuple[dict[str, TenantWorld], TenantWorld]:
    """The three class tenants and the capped one, the engine rows, adapters, budgets."""
    from adapters.access import AccessContext, SystemAccess
    from adapters.models import Adapter
    from adapters.services.registry import base_model_register_from_dir
    from bench.budget_overshoot import worst_of
    from budgets.rebuild import rebuild_counts
    from engine.sample_adapters import TINY_BASE_MODEL_NAME
    from tenants.services.tokens import token_issue
    from tests.workers.fleet import servable_version

    base = base_model_register_from_dir(
        access=SystemAccess(), name=TINY_BASE_MODEL_NAME, model_dir=tiny / "base"
    )
    rows = {name: gs.engine_row(name, proc, base) for name, proc in engines.items()}
    worlds = {}
    for i, klass in enumerate(CLASSES):
        tenant, owner = _tenant(klass, klass)
        issued = token_issue(
            access=AccessContext.for_user(owner), scopes=["inference"], tenant=tenant
        )
        _hot(tenant, owner, base, engines, keys, rows, 460 + i, (HOT_ALIAS,))
        cold = []
        for k in range(COLD_ADAPTERS):
            adapter = Adapter.objects.create(
                tenant=tenant, name=f"cold{k}", base_model=base, max_concurrent_requests=100_000
            )
            version = servable_version(adapter, VAR / "src" / klass, seed=500 + 10 * i + k)
            cold.append(f"cold{k}@{version.number}")
        for scope in ("tenant", f"token:{issued.token.pk}", f"alias:{HOT_ALIAS}"):
            _budget(tenant, scope, MAIN_BUDGET_TOKENS)
        worlds[klass] = TenantWorld(klass, klass, {"live": issued.plaintext}, cold)
    # The capped tenant: (token t1, alias capped-b) binds on t1's budget, (t2, capped-a) on
    # capped-a's, (t2, capped-b) on the tenant's once the other two have spent theirs.
    tenant, owner = _tenant("capped", "bronze")
    access = AccessContext.for_user(owner)
    t1 = token_issue(access=access, scopes=["inference"], tenant=tenant)
    t2 = token_issue(access=access, scopes=["inference"], tenant=tenant)
    _hot(tenant, owner, base, engines, keys, rows, 470, ("capped-a", "capped-b"))
    worst = worst_of(orjson.loads(body_for("capped-a")))
    _budget(tenant, f"token:{t1.token.pk}", CAPPED_WORST_CASES["token"] * worst)
    _budget(tenant, "alias:capped-a", CAPPED_WORST_CASES["alias"] * worst)
    _budget(tenant, "tenant", CAPPED_WORST_CASES["tenant"] * worst)
    capped = TenantWorld("capped", "bronze", {"t1": t1.plaintext, "t2": t2.plaintext}, [])
    rebuild_counts()
    return worlds, capped


CAPPED_ROUTES = {  # path -> (token, alias)
    "token": ("t1", "capped-b"),
    "alias": ("t2", "capped-a"),
    "tenant": ("t2", "capped-b"),
}


def plan_load(
    worlds: dict[str, TenantWorld],
    capped: TenantWorld | None,
    rate: float,
    seconds: float,
    seed: int,
    classes: tuple[str, ...],
    mix: tuple[float, ...],
    cold: bool = True,
) -> list[Planned]:
    """The simulator's trace (arrivals, class, cold or hot) as requests to real models: hot
    through the tenant's alias, cold to one of its cold versions (every request hot when not
    `cold`); and the capped trickle."""
    rng = random.Random(seed)
    plan = []
    for r in trace(rate, seconds, seed, classes, mix):
        world = worlds[r.klass]
        is_cold = r.cold and cold
        model = rng.choice(world.cold) if is_cold else HOT_ALIAS
        plan.append(Planned(r.at, world.slug, r.klass, model, world.tokens["live"], is_cold))
    if capped is not None:
        for i, at in enumerate(gs.poisson_arrivals(int(CAPPED_RATE * seconds), CAPPED_RATE, seed)):
            path = CAPPED_PATHS[i % len(CAPPED_PATHS)]
            token, alias = CAPPED_ROUTES[path]
            plan.append(Planned(at, "capped", "bronze", alias, capped.tokens[token], False, path))
    plan.sort(key=lambda p: p.at)
    return plan


def budget_rows(answers: list[Answer], worlds: dict[str, TenantWorld]) -> list[BudgetRow]:
    """Every budget against its limit, after the run: settled spend in PostgreSQL, its count in
    Redis, and the tokens the answers' usage delivered in its scope."""
    from bench.budget_overshoot import redis_counts
    from budgets.models import Budget, BudgetSpend

    def delivered(tenant: str, paths: tuple[str, ...] | None) -> int:
        return sum(
            a.tokens + a.prompt_tokens
            for a in answers
            if a.tenant == tenant and a.status == 200 and (paths is None or a.path in paths)
        )

    def refused(tenant: str, paths: tuple[str, ...]) -> int:
        return sum(
            1
            for a in answers
            if a.tenant == tenant and a.code == "budget_exceeded" and a.path in paths
        )

    rows = []
    for budget in Budget.objects.select_related("tenant").order_by("tenant__slug", "scope"):
        slug = budget.tenant.slug
        kind = budget.scope.split(":", 1)[0]
        if slug != "capped":
            scope_paths: tuple[str, ...] | None = None  # one token, every request: all of them
            if kind == "alias":
                delivered_tokens = sum(
                    a.tokens + a.prompt_tokens
                    for a in answers
                    if a.tenant == slug and a.status == 200 and not a.cold
                )
            else:
                delivered_tokens = delivered(slug, scope_paths)
            n_refused = 0
        else:
            paths = {
                "token": ("token",),
                "alias": ("alias",),
                "tenant": CAPPED_PATHS,
            }[kind]
            delivered_tokens = delivered(slug, paths)
            n_refused = refused(slug, (kind,) if kind != "tenant" else ("tenant",))
        persisted = sum(BudgetSpend.objects.filter(budget=budget).values_list("tokens", flat=True))
        used, reserved = redis_counts(budget)
        rows.append(
            BudgetRow(
                slug,
                budget.scope,
                budget.tokens,
                persisted,
                used,
                reserved,
                delivered_tokens,
                n_refused,
            )
        )
    return rows


def fleet_loads(phase: Phase, since: float) -> None:
    """The fleet's loads since `since` (epoch s), by the class of the loaded version's tenant,
    their latency, and the evictions that made room for them."""
    from datetime import UTC, datetime

    from workers.models import FleetAction

    rows = FleetAction.objects.filter(created_at__gte=datetime.fromtimestamp(since, UTC))
    loads = rows.filter(kind="load").select_related("version__tenant")
    counts: Counter[str] = Counter()
    latencies = []
    for row in loads:
        klass = row.version.tenant.slo_class if row.version else "?"
        counts[klass if row.ok else f"{klass} failed"] += 1
        if row.ok and row.latency_ms is not None:
            latencies.append(row.latency_ms)
    phase.loads = dict(counts)
    phase.load_ms_p50 = gs.percentile(latencies, 0.5) if latencies else None
    phase.load_ms_max = max(latencies) if latencies else None
    phase.evictions = rows.filter(kind__in=("evict", "unload"), ok=True).count()


def settle(expected_reserved: int = 0, timeout: float = 60.0) -> None:
    """Until no budget holds a reservation (every request's end settled) or the bound passes."""
    from bench.budget_overshoot import redis_counts
    from budgets.models import Budget

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(redis_counts(b)[1] == expected_reserved for b in Budget.objects.all()):
            return
        time.sleep(0.5)


# --- the run -------------------------------------------------------------------------------


def held_counts() -> dict[str, float]:
    """The gateways' held and held_s counts by class, as they stand."""
    from gateway.limits import CLASSES_KEY
    from workers import shared_state

    out = {}
    for key, value in shared_state.client().hgetall(CLASSES_KEY).items():
        name = key.decode() if isinstance(key, bytes) else key
        if name.startswith("held"):
            out[name] = float(value)
    return out


def lapses() -> int:
    """Replicas reaped so far, from every gateway's log (gateway.replicas' warning)."""
    total = 0
    for log in VAR.glob("gateway-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if "gave back the holds of" in line:
                total += int(line.split("gave back the holds of ", 1)[1].split(" ", 1)[0])
    return total


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of every core since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


ENGINE_SUMS = (
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
    "vllm:request_queue_time_seconds_sum",
    "vllm:request_queue_time_seconds_count",
)


def engine_sums(engines: dict[str, EngineProcess], keys: dict[str, str]) -> dict[str, float]:
    """The engines' TTFT and queue-time histograms' sums and counts, added over engines."""
    from workers.vllm_client import VLLMClient

    async def one(proc: EngineProcess, key: str) -> str:
        async with VLLMClient(proc.base_url, engine_key=key) as client:
            return await client.metrics()

    async def every() -> list[str]:
        return await asyncio.gather(*(one(p, keys[n]) for n, p in engines.items()))

    out = dict.fromkeys(ENGINE_SUMS, 0.0)
    for text in asyncio.run(every()):
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
    return out


def mean_ms(after: dict[str, float], before: dict[str, float], what: str) -> float | None:
    n = after[f"{what}_count"] - before[f"{what}_count"]
    return (after[f"{what}_sum"] - before[f"{what}_sum"]) / n * 1000 if n else None


@dataclass
class Services:
    engines: dict[str, EngineProcess] = field(default_factory=dict)
    procs: list[Any] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    gateways: dict[bool, list[Any]] = field(default_factory=lambda: {True: [], False: []})

    def stop_all(self) -> None:
        for proc in self.procs:
            gs.stop_group(proc)
        stop_engines(list(self.engines.values()))


def phase_name(load: float, on: bool) -> str:
    return f"{load:.1f}x {'on' if on else 'off'}"


def phase_order(loads: list[float]) -> list[tuple[float, bool]]:
    """Classes off and on at each load, ABBA over the loads (a drifting machine favours
    neither)."""
    out = []
    for i, load in enumerate(loads):
        pair = [(load, False), (load, True)]
        out += pair if i % 2 == 0 else pair[::-1]
    return out


def measure(args: argparse.Namespace, services: Services, db_url: str) -> Result:
    started = time.time()
    load_before = os.getloadavg()[0]
    tiny = gs.tiny_model()
    services.engines, services.keys = gs.start_engines(
        tiny, VAR, ENGINE_NAMES, max_loras=MAX_LORAS, max_cpu_loras=MAX_CPU_LORAS, pinned=True
    )
    redis_url = os.environ.get("BENCH_CLASSES_REDIS_URL", DEFAULT_REDIS_URL)
    keys = services.keys
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys=keys)
    env.update({"CELERY_TASK_DEFAULT_QUEUE": QUEUE, "ENGINE_QUEUE_PREFIX": f"{QUEUE}.node."})
    gs.django_setup(env, db_url)
    for proc in services.engines.values():
        proc.wait_ready(timeout=gs.READY_TIMEOUT_S)
        if args.engine_nice and proc.pid is not None:
            gs.renice_tree(proc.pid, args.engine_nice)
    worlds, capped = seed_world(services.engines, keys, tiny)
    services.procs.append(gs.start_worker(QUEUE, ENGINE_NAMES, VAR / "worker.log", env))
    replicas: dict[bool, list[str]] = {}
    for on in (True, False):
        extra = {
            "GATEWAY_SERVICE_CLASSES": "1" if on else "0",
            "GATEWAY_REQUEST_TIMEOUT_SECONDS": str(BUDGET_S),
            "GATEWAY_CLASS_HEADROOM": str(args.headroom),
            # One address stands for every caller here: the per-address limit out of reach.
            "GATEWAY_ADDRESS_RATE_PER_SECOND": "100000",
            "GATEWAY_ADDRESS_BURST": "100000",
        }
        replicas[on] = []
        for i in range(2):
            log = VAR / f"gateway-{'on' if on else 'off'}-{i}.log"
            gateway, base = gs.start_gateway(env, log, cpus=None, extra=extra)
            services.procs.append(gateway)
            services.gateways[on].append(gateway)
            replicas[on].append(base)

    from django.conf import settings

    from workers.models import Engine

    slots = sum(
        max(1, int(e.max_num_seqs * settings.GATEWAY_ENGINE_SLOTS_FACTOR))
        for e in Engine.objects.filter(name__in=ENGINE_NAMES)
    )
    hot = [(w.slug, HOT_ALIAS, w.tokens["live"]) for w in worlds.values()]
    # Warm every replica and both engines (the first compiled passes), then the capacity.
    warm = []
    for on in (True, False):
        warm += asyncio.run(closed_loop(hot, replicas[on], slots, WARM_SECONDS))[0]
    answers, elapsed = asyncio.run(closed_loop(hot, replicas[False], slots, CAPACITY_SECONDS))
    served = [a for a in answers if a.status == 200 and a.ttft_ms is not None]
    capacity = len(served) / elapsed
    print(f"capacity: {capacity:.2f} requests/s ({len(answers) - len(served)} failed)", flush=True)
    mix = tuple(float(x) for x in args.mix.split(","))
    result = Result(
        started_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        commit=subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        machine="",
        mix=list(mix),
        seed=args.seed,
        phase_seconds=args.phase_seconds,
        headroom=args.headroom,
        capacity_rps=capacity,
        capacity_tokens_s=sum(a.tokens for a in served) / elapsed,
        slots=slots,
        warm_answers=warm + answers,
        cold=not args.no_cold,
        engine_nice=args.engine_nice,
    )
    gold_rate = capacity * mix[0] / sum(mix)
    runs: list[tuple[str, float, bool, list[Planned]]] = [
        (
            "gold alone",
            1.0,
            True,
            plan_load(
                worlds,
                None,
                gold_rate,
                args.phase_seconds,
                args.seed,
                ("gold",),
                (1.0,),
                not args.no_cold,
            ),
        )
    ]
    for load, on in phase_order([float(x) for x in args.loads.split(",")]):
        plan = plan_load(
            worlds,
            capped,
            capacity * load,
            args.phase_seconds,
            args.seed,
            CLASSES,
            mix,
            not args.no_cold,
        )
        runs.append((phase_name(load, on), load, on, plan))
    for name, load, on, plan in runs:
        rate = gold_rate if name == "gold alone" else capacity * load
        phase = Phase(name, load, on, rate, args.phase_seconds)
        since = time.time()
        sums, cpu = engine_sums(services.engines, keys), machine_cpu()
        gateway_cpu = sum(gs.cpu_seconds(g.pid) for g in services.gateways[on])
        lapsed, held, client_cpu = lapses(), held_counts(), time.process_time()
        phase.answers = asyncio.run(replay(plan, replicas[on]))
        busy, total = (b - a for a, b in zip(cpu, machine_cpu(), strict=True))
        phase.cpu_busy = busy / total if total else None
        phase.gateway_cpu_s = (
            sum(gs.cpu_seconds(g.pid) for g in services.gateways[on]) - gateway_cpu
        )
        after = engine_sums(services.engines, keys)
        phase.engine_ttft_ms = mean_ms(after, sums, "vllm:time_to_first_token_seconds")
        phase.engine_queue_ms = mean_ms(after, sums, "vllm:request_queue_time_seconds")
        fleet_loads(phase, since)
        phase.lapses = lapses() - lapsed
        phase.client_cpu_s = time.process_time() - client_cpu
        phase.held = {k: round(v - held.get(k, 0.0), 1) for k, v in held_counts().items()}
        result.phases.append(phase)
        print(json.dumps(summary_line(phase)), flush=True)
        time.sleep(2.0)  # what a phase left at the engines ends before the next
    settle()
    every = result.warm_answers + [a for p in result.phases for a in p.answers]
    result.budgets = budget_rows(every, worlds)
    result.machine = gs.machine_note(load_before, list(services.engines.values()))
    result.seconds = time.time() - started
    return result


# --- the report ----------------------------------------------------------------------------


@dataclass
class ClassStats:
    sent: int
    served: int
    shed: int
    budget: int  # 429 budget_exceeded
    errors: int
    tokens: int
    good_tokens: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    hot_p99_ms: float | None


def class_stats(answers: list[Answer], klass: str) -> ClassStats:
    """One class's answers (the capped tenant's trickle left out: it is the budgets' traffic)."""
    mine = [a for a in answers if a.klass == klass and a.tenant != "capped"]
    served = [a for a in mine if a.status == 200 and a.ttft_ms is not None]
    shed = sum(1 for a in mine if a.code == "shed_for_capacity")
    budget = sum(1 for a in mine if a.code == "budget_exceeded")
    ttfts = [a.ttft_ms for a in served if a.ttft_ms is not None]
    hot = [a.ttft_ms for a in served if not a.cold and a.ttft_ms is not None]
    bound_ms = PLANS[klass].max_wait_s * 1000
    return ClassStats(
        sent=len(mine),
        served=len(served),
        shed=shed,
        budget=budget,
        errors=len(mine) - len(served) - shed - budget,
        tokens=sum(a.tokens for a in served),
        good_tokens=sum(a.tokens for a in served if (a.ttft_ms or 0) <= bound_ms),
        ttft_p50_ms=gs.percentile(ttfts, 0.5) if ttfts else None,
        ttft_p99_ms=gs.percentile(ttfts, 0.99) if ttfts else None,
        hot_p99_ms=gs.percentile(hot, 0.99) if hot else None,
    )


def summary_line(phase: Phase) -> dict[str, Any]:
    return {
        "phase": phase.name,
        "rate": round(phase.rate, 2),
        **{c: asdict(class_stats(phase.answers, c)) for c in CLASSES},
        "loads": phase.loads,
        "load_ms": [phase.load_ms_p50, phase.load_ms_max],
        "cpu_busy": phase.cpu_busy,
        "gateway_cpu_s": phase.gateway_cpu_s,
        "engine_ttft_queue_ms": [phase.engine_ttft_ms, phase.engine_queue_ms],
        "capped": dict(
            Counter(a.code or str(a.status) for a in phase.answers if a.tenant == "capped")
        ),
    }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def _held(held: dict[str, float]) -> str:
    if not held:
        return "-"
    return " / ".join(
        f"{held.get(f'held:{c}', 0):.0f} ({held.get(f'held_s:{c}', 0):.0f} s)" for c in CLASSES
    )


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def goals(result: Result) -> list[tuple[str, str, bool]]:
    """(goal, measured, met) for issue 46's goals at the loads that were run."""
    phases = {p.name: p for p in result.phases}
    alone = class_stats(phases["gold alone"].answers, "gold")
    out = []
    loads = sorted({p.load for p in result.phases if p.name != "gold alone"})
    for load in loads:
        on_p, off_p = phases.get(phase_name(load, True)), phases.get(phase_name(load, False))
        if on_p is None or off_p is None:
            continue
        on = {c: class_stats(on_p.answers, c) for c in CLASSES}
        off = {c: class_stats(off_p.answers, c) for c in CLASSES}
        good_on = sum(s.good_tokens for s in on.values())
        good_off = sum(s.good_tokens for s in off.values())
        out.append(
            (
                f"{load:.1f}x: goodput on >= 0.95x off",
                f"{good_on:,} / {good_off:,} tokens = {good_on / max(1, good_off):.2f}x",
                good_on >= 0.95 * good_off,
            )
        )
        if load != 2.0:
            continue
        p99, ref = on["gold"].ttft_p99_ms, alone.ttft_p99_ms
        out.append(
            (
                "2.0x: gold TTFT p99 within 1.25x of gold alone at 1.0x",
                f"{_ms(p99)} / {_ms(ref)} = {(p99 or 0) / (ref or 1):.2f}x",
                p99 is not None and ref is not None and p99 <= 1.25 * ref,
            )
        )
        out.append(
            (
                "2.0x: gold 0 shed, 0 errors",
                f"{on['gold'].shed} shed, {on['gold'].errors} errors",
                on["gold"].shed + on["gold"].errors == 0,
            )
        )
        weights = sum(PLANS[c].weight for c in CLASSES)
        share = PLANS["bronze"].weight / weights
        served = sum(s.tokens for s in on.values())
        got = on["bronze"].tokens / served if served else 0.0
        out.append(
            (
                f"2.0x: bronze at least its weight's share ({share:.0%}) of served tokens",
                f"{got:.1%}",
                got >= share,
            )
        )
    over = sum(b.over for b in result.budgets)
    counted = sum(b.counted_over for b in result.budgets)
    out.append(
        (
            "budgets on every scope: 0 tokens over any budget",
            f"{over} delivered over (counted over: {counted}); "
            f"{sum(1 for b in result.budgets if b.refused)} budgets bound",
            over == 0,
        )
    )
    return out


def render(result: Result, command: str, notes: list[str]) -> str:
    mix = ":".join(f"{m:g}" for m in result.mix)
    lines = [
        f"<!-- {SECTION}:begin -->",
        "## Service classes through real engines and two gateway replicas (`make bench-classes`)",
        "",
        f"Recorded {result.started_at[:10]}, commit {result.commit}: run "
        f"{result.started_at[11:]}; {result.machine}. "
        f"`{command}` ({result.seconds / 60:.1f} min).",
        "",
        f"bench/classes_real.py: two CPU engines (tiny Llama, {result.slots // 2} sequences each, "
        "priority scheduling, each pinned to a core"
        + (f", at nice {result.engine_nice}" if result.engine_nice else "")
        + "), one Celery worker (cold loads), two gateway "
        "replicas with classes on and two with them off on one PostgreSQL and Redis; three "
        f"tenants gold, silver, bronze (offered load {mix}, "
        + (
            f"10% of requests to one of {COLD_ADAPTERS} cold adapters each, the rest"
            if result.cold
            else "every request (the trace's cold ones too)"
        )
        + " to a hot adapter resident on both engines "
        f"via an alias), streams of {MAX_TOKENS} tokens, requests to the replicas in turn, "
        f"{result.phase_seconds:g} s of arrivals per phase, gold headroom {result.headroom}. "
        f"Capacity measured first: {result.capacity_rps:.2f} requests/s "
        f"({result.capacity_tokens_s:,.0f} tokens/s) with {result.slots} streams at once "
        "through the classes-off replicas. TTFT at the client (every wait included: the "
        "gateway's queue, a cold load, the engine's queue). Goodput: tokens of answers whose "
        "TTFT was within their class's bound (10 / 5 / 2 s). The capped tenant's trickle "
        f"({CAPPED_RATE:g}/s, bronze) is left out of the class columns.",
        "",
        "| phase | gold TTFT p50 / p99 (hot p99) | gold shed / errors | silver p50 / p99 "
        "| silver shed / errors | bronze p50 / p99 | bronze shed / errors | share of served "
        "tokens g / s / b | goodput (tokens) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in result.phases:
        s = {c: class_stats(p.answers, c) for c in CLASSES}
        served = sum(x.tokens for x in s.values()) or 1
        shares = " / ".join(f"{s[c].tokens / served:.0%}" for c in CLASSES)
        cells = [
            f"{p.name} ({p.rate:.1f}/s)",
            f"{_ms(s['gold'].ttft_p50_ms)} / {_ms(s['gold'].ttft_p99_ms)} "
            f"({_ms(s['gold'].hot_p99_ms)})",
            f"{s['gold'].shed} / {s['gold'].errors}",
        ]
        for c in ("silver", "bronze"):
            cells += [
                f"{_ms(s[c].ttft_p50_ms)} / {_ms(s[c].ttft_p99_ms)}",
                f"{s[c].shed} / {s[c].errors}",
            ]
        if p.name == "gold alone":
            cells[-4:] = ["-", "-", "-", "-"]
        cells += [shares, f"{sum(x.good_tokens for x in s.values()):,}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Cold loads in each phase: gold's requests to a cold adapter (their TTFT holds the "
        "load), and the fleet's loads (FleetAction rows, by the class of the loaded version's "
        "tenant; the capped tenant's adapter counts as bronze), their latency and the evictions "
        "that made room; and where the time went: the machine's CPU busy share while the phase "
        "ran, the CPU seconds of its two gateway replicas, and the engines' own mean TTFT and "
        "queue time (vLLM's histograms, every class together), and the gateway replicas whose "
        "lease lapsed while it ran (another replica gave their holds back: "
        "`gateway.replicas`), the requests the gateways held for their class's share and the "
        "seconds they waited (`service_class_queue_seconds`), and the load generator's own CPU "
        "(`-`: not recorded by that run).",
        "",
        "| phase | gold hot TTFT p50 / p99 | gold cold requests, TTFT p50 / max | loads gold / "
        "silver / bronze (failed) | load p50 / max | evictions | machine CPU busy | gateways' "
        "CPU | engines' mean TTFT / queue | replica leases lapsed | held for the class's share "
        "g / s / b (seconds) | load generator's CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in result.phases:
        gold = [a for a in p.answers if a.klass == "gold" and a.status == 200 and a.ttft_ms]
        hot = [a.ttft_ms or 0.0 for a in gold if not a.cold]
        cold = [a.ttft_ms or 0.0 for a in gold if a.cold]
        failed = sum(v for k, v in p.loads.items() if k.endswith("failed"))
        lines.append(
            f"| {p.name} | {_ms(gs.percentile(hot, 0.5) if hot else None)} / "
            f"{_ms(gs.percentile(hot, 0.99) if hot else None)} | {len(cold)}, "
            f"{_ms(gs.percentile(cold, 0.5) if cold else None)} / "
            f"{_ms(max(cold) if cold else None)} | "
            + " / ".join(str(p.loads.get(c, 0)) for c in CLASSES)
            + f" ({failed}) | {_ms(p.load_ms_p50)} / {_ms(p.load_ms_max)} | {p.evictions} | "
            f"{_pct(p.cpu_busy)} | {_s(p.gateway_cpu_s)} | {_ms(p.engine_ttft_ms)} / "
            f"{_ms(p.engine_queue_ms)} | {'-' if p.lapses is None else p.lapses} | "
            f"{_held(p.held)} | {_s(p.client_cpu_s)} |"
        )
    lines += [
        "",
        "Budgets after the run (day windows; the three class tenants' budgets are there to be "
        "checked on every request, the capped tenant's bind): limit, spend settled in "
        "PostgreSQL, used and still reserved in Redis, tokens the answers' usage delivered in "
        "the scope (complete answers' usage chunks, the warm-up and capacity streams included; "
        "a stream cut short is not in it), requests refused `budget_exceeded` on the path it "
        "binds, tokens delivered over the limit, and what the counts hold over it.",
        "",
        "| tenant | scope | limit | persisted | Redis used / reserved | delivered | refused "
        "| delivered over | counted over |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b in result.budgets:
        scope = b.scope if not b.scope.startswith("token:") else "token"
        lines.append(
            f"| {b.tenant} | {scope} | {b.limit:,} | {b.persisted:,} | {b.redis_used:,} / "
            f"{b.redis_reserved:,} | {b.delivered:,} | {b.refused} | {b.over} | "
            f"{b.counted_over} |"
        )
    lines += ["", "| goal (issue 46) | measured | |", "|---|---|---|"]
    lines += [f"| {g} | {m} | {'met' if ok else 'NOT met'} |" for g, m, ok in goals(result)]
    for note in notes:
        lines += ["", note]
    lines += ["", f"<!-- {SECTION}:end -->"]
    return "\n".join(lines) + "\n"


def load_result(path: Path) -> Result:
    data = json.loads(path.read_text())
    data["phases"] = [
        Phase(**{**p, "answers": [Answer(**a) for a in p["answers"]]}) for p in data["phases"]
    ]
    data["budgets"] = [BudgetRow(**b) for b in data["budgets"]]
    data["warm_answers"] = [Answer(**a) for a in data.get("warm_answers", [])]
    return Result(**data)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loads", default="1.0,1.5,2.0", help="multiples of the capacity")
    parser.add_argument("--phase-seconds", type=float, default=30.0)
    parser.add_argument("--mix", default="2,3,5", help="offered load gold,silver,bronze")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument(
        "--no-cold",
        action="store_true",
        help="every request to its tenant's hot adapter (the trace's cold requests too)",
    )
    parser.add_argument(
        "--engine-nice",
        type=int,
        default=0,
        help="the engines' process trees at this niceness once ready (the gateways and the load "
        "generator then take the CPU first, as on hosts of their own)",
    )
    parser.add_argument("--headroom", type=int, default=2, help="GATEWAY_CLASS_HEADROOM")
    parser.add_argument("--section", default=SECTION, help="the docs section to write")
    add_report_arguments(parser)
    args = parser.parse_args()
    command = " ".join([".venv/bin/python -m bench.classes_real", *sys.argv[1:]])
    if args.render_only:
        result = load_result(VAR / "result.json")
    else:
        db_url = os.environ.get("BENCH_CLASSES_DATABASE_URL", DEFAULT_DB_URL)
        services = Services()
        result = gs.measure_and_save(
            VAR, db_url, args.keep_db, services, lambda: measure(args, services, db_url)
        )
    section = render(result, args.render_only or command, args.note)
    if args.section != SECTION:
        for marker in ("begin", "end"):
            section = section.replace(f"<!-- {SECTION}:{marker}", f"<!-- {args.section}:{marker}")
    print(section)
    if args.write_docs:
        write_section(args.section, section)


if __name__ == "__main__":
    main()

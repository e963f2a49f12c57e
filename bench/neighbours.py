"""Noisy neighbours: tenant B sends steady streaming traffic through the
gateway while tenant A, in turn, (a) floods at 10x its requests per minute, (b) holds 32 streams
it never reads, (c) sends requests that outlive the gateway's time budget, (d) sends the largest
requests its plan allows; and (e) while anyone sends 1,000 requests/s of made-up tokens from
another address; and (f) while an eval run of 500 cases runs (a candidate version against the
base model, started as the page starts one and run by a real Celery worker: background requests,
evals.services.asking), on B's own adapter: B's live requests must go first even against its own
evals (A's plan allows it 60 requests a minute, too few for an eval of 1,000 requests); and (g)
while A's callers send steady live traffic to an alias of A's whose release plan is in its shadow
step at a sample share of 10 % (the plan started through the portal's own services; a real
worker scores the samples and asks the candidate and the judge in the background lane,
evals.services.shadow_pairs), with `live` beside it: the same traffic to the stable version by
name, which no plan samples. The shadow phase also counts the extra engine work: candidate asks
and judge calls against A's live requests, and what the engines' own counters served. B's time
to first token (p50, p99) and its answers by status in each phase, against B alone in the same
run. Goal: B's p99 within 1.25x of alone, no non-2xx for B.

Two real CPU engines (tiny model), one gateway (uvicorn, portal.asgi) on a database and Redis
of the bench's own; both tenants call the base model, so no adapter load is in the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import secrets
import shutil
import socket
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import gateway_support as gs
from bench.docs_section import add_report_arguments, write_section
from bench.neighbours_timeline import Slow, Timeline, attribute, engine_shares
from engine.launcher import REPO_ROOT, EngineProcess, stop_engines

DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_neighbours"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
VAR = REPO_ROOT / "var" / "bench" / "neighbours"
# Every run's result.json, kept by its start (VAR is emptied at each run): --pool-runs reads them.
RUNS = REPO_ROOT / "var" / "bench" / "neighbours-runs"
ENGINE_NAMES = ("nb-a", "nb-b")
PHASES = ("alone", "flood", "unread", "overtime", "largest", "anonymous", "eval")
# Phases run only when named (--phases): A's live traffic to its alias, sampled by a release
# plan in its shadow step (shadow), and the same traffic to the stable version by name (live).
SHADOW_PHASES = ("live", "shadow")
SHADOW_ALIAS = "support-bot"
SHADOW_SHARE = 0.10  # the plan's sample share
A_SHADOW_BODY = {"max_tokens": 8, "temperature": 0}
# Reference phases of their own, straight at the engines only: B on the second engine, with the
# first engine idle ("quiet") or running what an eval run sends it ("busy": the run's bound of
# short completions in flight, at the rate the eval phases' runs reached). Their ratio is what
# one engine's compute costs B's on this host, with no gateway, worker or database in the way:
# the floor for the eval phase.
LANE_PHASES = ("quiet", "busy")


@dataclass
class Busy:
    """What the busy phase sends the first engine: at most `in_flight` at once, at `rate` per
    second (None: as fast as they are answered)."""

    in_flight: int = 1
    rate: float | None = None


@dataclass
class Shadow:
    """What the live and shadow phases need: A's rate, its stable version's model name, the
    plan in its shadow step, and the engines (name: (url, key)) whose counters are read."""

    rate: float = 2.0
    stable: str = ""
    plan_id: int = 0
    engines: dict[str, tuple[str, str]] = field(default_factory=dict)
    stable_served: str = ""  # the stable's and the candidate's served names (their requests in
    candidate_served: str = ""  # flight, --timeline)
    worker_pid: int | None = None  # the shadow worker's process (its CPU, --timeline)


EVAL_QUEUE = "nb-evals"  # the bench worker's queue: the eval run's task goes there
BUDGET_S = 3.0  # the bench gateway's GATEWAY_REQUEST_TIMEOUT_SECONDS
WRITE_DEADLINE_S = 2.0  # its GATEWAY_WRITE_DEADLINE_SECONDS
A_RPM = 60
# Tenant A's plan: what a platform admin gives a tenant on shared engines.
A_PLAN = {
    "quota_requests_per_minute": A_RPM,
    "max_in_flight_requests": 16,
    "max_n": 4,
    "max_prompts": 2,
    "max_tokens": 1000,  # the engines' context is 1024
    "max_logprobs": 20,
}
B_BODY = {"max_tokens": 8, "temperature": 0, "stream": True}
# The anonymous phase: made-up tokens from an address of their own (B's is 127.0.0.1), over this
# many keep-alive connections, against the gateway's per-address limit at its production default.
ANON_SOURCE = "127.0.0.2"
ANON_CONNECTIONS = 32
ADDRESS_LIMIT = {"GATEWAY_ADDRESS_RATE_PER_SECOND": "100", "GATEWAY_ADDRESS_BURST": "200"}
PROMPT = "Tell me about tea."


@dataclass
class PhaseResult:
    name: str
    b_ttft_p50_ms: float | None
    b_ttft_p99_ms: float | None
    b_requests: int
    b_status: dict[str, int]
    a_status: dict[str, int]
    via: str = "gateway"  # or "direct": both tenants straight to the engines (the reference)
    b_ttfts_ms: list[float] = field(default_factory=list)  # every answered request's, to pool
    # --timeline: beside each of b_ttfts_ms, what it waited beside (neighbours_timeline.Slow's
    # fields), and the phase's engine shares
    b_where: list[list[Any]] = field(default_factory=list)
    timeline: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    started_at: str
    machine: str
    phase_seconds: float
    b_rate: float
    phases: list[PhaseResult] = field(default_factory=list)
    anon_rate: float = 1000.0
    eval_cases: int = 500
    live_headroom: int | None = None  # GATEWAY_LIVE_HEADROOM of the gateway and the eval's worker
    repeat: int = 1  # the gateway phases, run this many times in turn (their samples pooled)
    a_rate: float = 2.0  # A's live requests a second in the live and shadow phases
    sample_share: float = SHADOW_SHARE


# --- the traffic ---------------------------------------------------------------------------


def _body(model: str, **extra: Any) -> bytes:
    return orjson.dumps(
        {"model": model, "messages": [{"role": "user", "content": PROMPT}], **extra}
    )


def via_gateway(base: str, token: str) -> list[gs.Target]:
    return [gs.Target("gateway", base, "tiny-llama", {"authorization": f"Bearer {token}"})]


async def steady_b(
    targets: list[gs.Target],
    rate: float,
    seconds: float,
    seed: int,
    sent: list[float] | None = None,
) -> list[gs.Sample]:
    """B: Poisson arrivals at `rate` per second, each a short stream (to the targets in turn);
    each one's sending time (perf_counter) appended to `sent`."""
    body = _body("tiny-llama", **B_BODY)
    arrivals = gs.poisson_arrivals(int(rate * seconds * 2) + 10, rate, seed)
    started = time.perf_counter()
    tasks: list[asyncio.Task[gs.Sample]] = []
    async with gs.new_client(256) as client:
        for at in arrivals:
            if at >= seconds:
                break
            await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
            if sent is not None:
                sent.append(time.perf_counter())
            tasks.append(
                asyncio.create_task(
                    gs.send_one(
                        client,
                        targets[len(tasks) % len(targets)],
                        chat=True,
                        stream=True,
                        body=body,
                    )
                )
            )
        return list(await asyncio.gather(*tasks))


async def a_requests(
    targets: list[gs.Target], body: bytes, rate: float, seconds: float, chat: bool = True
) -> Counter:
    """A at a fixed rate (to the targets in turn), not waiting for answers; its answers by
    status."""
    statuses: Counter = Counter()
    started = time.perf_counter()
    tasks = []
    async with gs.new_client(512, timeout=BUDGET_S * 3) as client:
        i = 0
        while time.perf_counter() - started < seconds:
            i += 1
            await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
            target = targets[i % len(targets)]
            tasks.append(
                asyncio.create_task(gs.send_one(client, target, chat=chat, stream=False, body=body))
            )
        for sample in await asyncio.gather(*tasks):
            statuses[str(sample.status)] += 1
    return statuses


async def a_unread(base: str, token: str, seconds: float, count: int = 32) -> Counter:
    """A opens `count` streams and reads none of them (a tiny receive window), reopening any
    the gateway closed, for the whole phase."""
    host, port = base.removeprefix("http://").split(":")
    body = _body(
        "tiny-llama", stream=True, max_tokens=256, ignore_eos=True, logprobs=True, top_logprobs=20
    )
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    opened = 0

    def open_one() -> socket.socket:
        nonlocal opened
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        sock.connect((host, int(port)))
        sock.sendall(head + body)
        opened += 1
        return sock

    socks = [open_one() for _ in range(count)]
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        await asyncio.sleep(1.0)
        for i, sock in enumerate(socks):
            with contextlib.suppress(BlockingIOError, OSError):
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":  # closed by peer
                    sock.close()
                    socks[i] = open_one()
    for sock in socks:
        sock.close()
    return Counter({"opened": opened})


async def a_anonymous(base: str, rate: float, seconds: float) -> Counter:
    """Made-up tokens at `rate` a second from ANON_SOURCE, each connection on its own schedule
    (a late answer delays only its connection's next request); answers by status, and the rate
    reached."""
    statuses: Counter = Counter()
    body = _body("tiny-llama", max_tokens=4)
    started = time.perf_counter()

    async def connection(k: int) -> None:
        client = gs.RawClient(base, source=ANON_SOURCE)
        try:
            for i in itertools.count():
                at = (i * ANON_CONNECTIONS + k) / rate
                if at >= seconds:
                    return
                await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
                token = f"lp_{secrets.token_hex(5)}_{secrets.token_urlsafe(32)}"
                headers = {"authorization": f"Bearer {token}"}
                request = client.request_bytes("/v1/chat/completions", headers, body)
                statuses[str((await client.send(request, stream=False)).status)] += 1
        finally:
            await client.close()

    await asyncio.gather(*(connection(k) for k in range(ANON_CONNECTIONS)))
    statuses["sent/s"] = round(sum(statuses.values()) / (time.perf_counter() - started))
    return statuses


def a_load(
    phase: str,
    targets: list[gs.Target],
    seconds: float,
    anon_rate: float,
    busy: Busy,
    shadow: Shadow | None = None,
) -> Any:
    if phase == "flood":  # 10x the rate limit, small requests
        return a_requests(targets, _body("tiny-llama", max_tokens=4), A_RPM * 10 / 60, seconds)
    if phase == "unread":
        (target,) = targets  # through the gateway only
        token = target.headers["authorization"].removeprefix("Bearer ")
        return a_unread(target.base_url, token, seconds)
    if phase == "overtime":  # past the budget: the plan's max tokens, never stopping early
        body = _body(
            "tiny-llama", max_tokens=A_PLAN["max_tokens"], ignore_eos=True, n=A_PLAN["max_n"]
        )
        return a_requests(targets, body, 0.5, seconds)
    if phase == "largest":  # the largest the plan allows, at its rate limit
        body = orjson.dumps(
            {
                "model": "tiny-llama",
                "prompt": [PROMPT] * A_PLAN["max_prompts"],
                "n": A_PLAN["max_n"],
                "max_tokens": A_PLAN["max_tokens"],
                "ignore_eos": True,
                "logprobs": 5,
            }
        )
        return a_requests(targets, body, A_RPM / 60, seconds, chat=False)
    if phase == "anonymous":
        return a_anonymous(targets[0].base_url, anon_rate, seconds)
    if phase == "eval":
        return a_eval(seconds)
    if phase == "busy":
        return a_busy(targets, seconds, busy)
    if phase in SHADOW_PHASES and shadow is not None:
        return a_live(targets, phase, seconds, shadow)
    return None


async def a_live(targets: list[gs.Target], phase: str, seconds: float, shadow: Shadow) -> Counter:
    """A's callers at `shadow.rate` a second: to the alias (shadow), whose plan samples them, or
    to the stable version by name (live), which nothing samples. In the shadow phase, the extra
    work the plan caused, counted once the worker has handled every sample of the phase."""
    model = SHADOW_ALIAS if phase == "shadow" else shadow.stable
    body = _body(model, **A_SHADOW_BODY)
    before = await asyncio.to_thread(shadow_counts, shadow) if phase == "shadow" else {}
    statuses = await a_requests(targets, body, shadow.rate, seconds)
    if phase != "shadow":
        return statuses
    after = await asyncio.to_thread(shadow_drain, shadow)
    return statuses + Counter(
        {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}
    )


async def a_busy(targets: list[gs.Target], seconds: float, busy: Busy) -> Counter:
    """Eval-shaped completions on the target: `busy.in_flight` loops, each on its own schedule
    when there is a rate."""
    (target,) = targets
    statuses: Counter = Counter()
    started = time.perf_counter()
    n = busy.in_flight
    async with gs.new_client(n, timeout=BUDGET_S * 3) as client:

        async def loop(k: int) -> None:
            for i in itertools.count():
                at = (i * n + k) / busy.rate if busy.rate else 0.0
                if max(at, time.perf_counter() - started) >= seconds:
                    return
                await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
                body = orjson.dumps(
                    {
                        "model": target.model,
                        "prompt": f"Question {i * n + k}: say something.",
                        "max_tokens": B_BODY["max_tokens"],
                        "temperature": 0,
                        "seed": 0,
                    }
                )
                sample = await gs.send_one(client, target, chat=False, stream=False, body=body)
                statuses[str(sample.status)] += 1

        await asyncio.gather(*(loop(k) for k in range(n)))
    statuses["in flight"] = n
    statuses["sent/s"] = round(sum(statuses[k] for k in statuses if k.isdigit()) / seconds)
    return statuses


def _start_eval() -> int:
    from adapters.models import AdapterVersion
    from evals.services.runner import run_start

    candidate = AdapterVersion.objects.get(tenant__slug="tenant-b", status="validated")
    run, _ = run_start(version=candidate)
    return run.pk


def _eval_wait(seconds: float = 600.0) -> None:
    """Until no eval run is queued or running (the phase's run ends before the next phase)."""
    from evals.models import EvalRun, RunStatus

    deadline = time.monotonic() + seconds
    while EvalRun.objects.filter(status__in=(RunStatus.QUEUED, RunStatus.RUNNING)).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"an eval run did not end within {seconds:.0f} s")
        time.sleep(0.5)


def _eval_progress(run_id: int) -> tuple[str, int, int]:
    from evals.models import EvalCaseResult, EvalRun

    run = EvalRun.objects.get(pk=run_id)
    failed = EvalCaseResult.objects.filter(run_id=run_id).exclude(error="").count()
    return run.status, run.cases_done, failed


async def a_eval(seconds: float) -> Counter:
    """B's eval run, started as the page starts one (run_start: the task after commit, on the
    bench's worker); its progress when the phase ends: cases done (candidate side), answers that
    failed, and the run's status."""
    run_id = await asyncio.to_thread(_start_eval)
    await asyncio.sleep(seconds)
    status, done, failed = await asyncio.to_thread(_eval_progress, run_id)
    await asyncio.to_thread(_eval_wait)  # what the run has left ends before the next phase
    return Counter({"cases done": done, "failed answers": failed, f"run {status}": 1})


async def run_phase(
    phase: str,
    a: list[gs.Target],
    b: list[gs.Target],
    seconds: float,
    rate: float,
    seed: int,
    via: str = "gateway",
    anon_rate: float = 1000.0,
    busy: Busy | None = None,
    shadow: Shadow | None = None,
    timeline: Timeline | None = None,
) -> PhaseResult:
    sent: list[float] = []
    with timeline or contextlib.nullcontext():
        load = a_load(phase, a, seconds, anon_rate, busy or Busy(), shadow)
        b_task = asyncio.create_task(steady_b(b, rate, seconds, seed, sent))
        a_status = await load if load is not None else Counter()
        samples = await b_task
    answered = [
        (s.ttft_ms, at)
        for s, at in zip(samples, sent, strict=True)
        if s.ok and s.ttft_ms is not None
    ]
    ttfts = [t for t, _ in answered]
    result = PhaseResult(
        name=phase,
        b_ttft_p50_ms=gs.percentile(ttfts, 0.5) if ttfts else None,
        b_ttft_p99_ms=gs.percentile(ttfts, 0.99) if ttfts else None,
        b_requests=len(samples),
        b_status=dict(Counter(str(s.status) for s in samples)),
        a_status=dict(a_status),
        via=via,
        b_ttfts_ms=ttfts,
    )
    if timeline is not None and via == "gateway":
        ticks, names = timeline.ticks, timeline.engines
        result.b_where = [
            list(asdict(attribute(ticks, names, at, t)).values()) for t, at in answered
        ]
        result.timeline = engine_shares(ticks, names, [at for _, at in answered], ttfts)
    return result


# --- the world -----------------------------------------------------------------------------


def live_headroom() -> int:
    from django.conf import settings

    return int(settings.GATEWAY_LIVE_HEADROOM)


def seed(engines: dict[str, EngineProcess], tiny: Path) -> dict[str, str]:
    """Tenants A and B (A on its plan), both engines in the shared pool; their tokens."""
    from django.contrib.auth import get_user_model

    from adapters.access import AccessContext, SystemAccess
    from adapters.services.registry import base_model_register_from_dir
    from engine.sample_adapters import TINY_BASE_MODEL_NAME
    from tenants.models import Membership, Tenant
    from tenants.services.tokens import token_issue

    base = base_model_register_from_dir(
        access=SystemAccess(), name=TINY_BASE_MODEL_NAME, model_dir=tiny / "base"
    )
    for name, proc in engines.items():
        gs.engine_row(name, proc, base)
    tokens = {}
    for slug, plan in (("a", A_PLAN), ("b", {"quota_requests_per_minute": 100_000})):
        tenant = Tenant.objects.create(slug=f"tenant-{slug}", name=slug.upper(), **plan)
        owner = get_user_model().objects.create_user(username=f"owner-{slug}")
        Membership.objects.create(user=owner, tenant=tenant, role="owner")
        access = AccessContext.for_user(owner)
        tokens[slug] = token_issue(access=access, scopes=["inference"], tenant=tenant).plaintext
    return tokens


def seed_eval(engines: dict[str, EngineProcess], keys: dict[str, str], cases: int) -> None:
    """B's adapter with a validated candidate resident on the first engine (as the runner leaves
    it), a suite of `cases` prompts, and the adapter's policy naming it."""
    import json

    from adapters.access import AccessContext
    from adapters.models import Adapter
    from evals.services.policies import policy_set
    from evals.services.suites import suite_upload
    from tenants.models import Membership, Tenant
    from tests.workers.fleet import servable_version
    from workers.models import Engine

    tenant = Tenant.objects.get(slug="tenant-b")
    owner = Membership.objects.get(tenant=tenant, role="owner").user
    base = Engine.objects.get(name=ENGINE_NAMES[0]).base_model
    adapter = Adapter.objects.create(tenant=tenant, name="support", base_model=base)
    candidate = servable_version(adapter, VAR / "src", seed=1, status="validated")
    name = ENGINE_NAMES[0]
    row = Engine.objects.get(name=name)
    gs.make_resident(engines[name], keys[name], row, candidate, VAR / "src" / "src-support-1")
    lines = [
        {
            "id": f"c{i}",
            "prompt": f"Question {i}: say something.",
            "max_tokens": B_BODY["max_tokens"],
        }
        for i in range(cases)
    ]
    raw = "".join(json.dumps(line) + "\n" for line in lines).encode()
    access = AccessContext.for_user(owner)
    suite_upload(access=access, tenant=tenant, name="qa", raw=raw)
    policy_set(access=access, adapter=adapter, suite="qa")


def seed_shadow(
    engines: dict[str, EngineProcess], keys: dict[str, str], rate: float, share: float
) -> Shadow:
    """A's adapter with a stable version on both engines and a candidate on the second (the
    first holds B's eval candidate when the eval phase runs), resident as the fleet leaves them;
    a policy whose judge is the base model; the alias on the stable; and a release plan started
    through the portal's services, its first step shadow at `share`."""
    from adapters.access import AccessContext
    from adapters.models import Adapter
    from adapters.services.aliases import alias_set
    from evals.models import EvalPolicy
    from evals.services.release_plans import plan_start
    from tenants.models import Membership, Tenant
    from tests.evals.live_policy import live_checks_policy
    from tests.workers.fleet import servable_version
    from workers.models import Engine

    tenant = Tenant.objects.get(slug="tenant-a")
    owner = Membership.objects.get(tenant=tenant, role="owner").user
    access = AccessContext.for_user(owner)
    base = Engine.objects.get(name=ENGINE_NAMES[0]).base_model
    adapter = Adapter.objects.create(tenant=tenant, name="support", base_model=base)
    src = VAR / "src-a"
    stable = servable_version(adapter, src, seed=461)
    candidate = servable_version(adapter, src, seed=462)
    for name in ENGINE_NAMES:
        row = Engine.objects.get(name=name)
        gs.make_resident(engines[name], keys[name], row, stable, src / "src-support-461")
    name = ENGINE_NAMES[1]
    row = Engine.objects.get(name=name)
    gs.make_resident(engines[name], keys[name], row, candidate, src / "src-support-462")
    live_checks_policy(tenant=tenant, adapter=adapter, checks={"max_chars": 4000})
    EvalPolicy.objects.filter(adapter=adapter).update(judge=base.name)
    alias = alias_set(
        access=access,
        tenant=tenant,
        name=SHADOW_ALIAS,
        targets=[{"version": f"support@{stable.number}", "weight": 100}],
    )
    # The controller is not ticked here (the bench plays beat for the scoring and shadow tasks
    # only), so the plan stays in its shadow step for the whole run.
    plan = plan_start(
        access=access,
        alias=alias,
        candidate=f"support@{candidate.number}",
        steps=[0, 100],
        sample_share=share,
    )
    return Shadow(
        rate=rate,
        stable=f"support@{stable.number}",
        plan_id=plan.pk,
        engines={n: (p.base_url, keys[n]) for n, p in engines.items()},
        stable_served=stable.served_name,
        candidate_served=candidate.served_name,
    )


def _tenant_rpm(slug: str, rpm: int) -> None:
    """The tenant's requests a minute, saved (the gateway's tables follow saves)."""
    from tenants.models import Tenant

    tenant = Tenant.objects.get(slug=slug)
    tenant.quota_requests_per_minute = rpm
    tenant.save()


def engine_requests(engines: dict[str, tuple[str, str]]) -> int:
    """Requests the engines finished, by their own counters (vllm:request_success_total)."""
    from workers.vllm_client import VLLMClient

    async def one(url: str, key: str) -> int:
        async with VLLMClient(url, engine_key=key) as client:
            text = await client.metrics()
        return round(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("vllm:request_success_total")
            )
        )

    async def every() -> int:
        return sum(await asyncio.gather(*(one(u, k) for u, k in engines.values())))

    return asyncio.run(every())


def shadow_counts(shadow: Shadow) -> dict[str, int]:
    """The plan's step and usage counters, and the engines' finished requests, now."""
    from datetime import UTC, datetime

    from evals.models import ReleasePlan, ReleaseStep
    from gateway.usage import SHADOW_PREFIX, usage_key
    from workers import shared_state

    plan = ReleasePlan.objects.get(pk=shadow.plan_id)
    step = ReleaseStep.objects.get(plan=plan, index=0)
    usage = shared_state.client().hgetall(usage_key(datetime.now(UTC).date()))

    def used(version: int) -> int:
        field = f"{plan.alias.tenant_id}|{version}|{SHADOW_PREFIX}requests".encode()
        return int(usage.get(field, 0))

    counts = {
        "engine requests": engine_requests(shadow.engines),
        "sampled": step.stable_n,
        "candidate asks": used(plan.candidate_id),
        "judge calls": used(0),
        "pairs": sum(step.pairs.values()),
    }
    counts.update({f"skipped {k}": v for k, v in step.shadow_skipped.items()})
    return counts


def shadow_drain(shadow: Shadow, seconds: float = 120.0) -> dict[str, int]:
    """The counters once the worker has handled every sample the phase's requests left: the
    gateway's buffer sent, the samples scored, the shadow list empty and no pass running, the
    same counts twice in a row."""
    from workers import shared_state
    from workers.redis_contract.keys import RELEASE_SAMPLES, RELEASE_SHADOW, RELEASE_SHADOW_LOCK

    client = shared_state.client()
    deadline = time.monotonic() + seconds
    last: dict[str, int] = {}
    while time.monotonic() < deadline:
        time.sleep(2.0)
        busy = client.llen(RELEASE_SAMPLES) or client.llen(RELEASE_SHADOW)
        if busy or client.exists(RELEASE_SHADOW_LOCK):
            continue
        counts = shadow_counts(shadow)
        if counts == last:
            return counts
        last = counts
    raise RuntimeError(f"the shadow worker did not finish the phase's samples in {seconds:.0f} s")


@contextlib.contextmanager
def shadow_beat() -> Any:
    """Beat for the two tasks of shadow pairs only, at their schedule (the worker runs them):
    scoring the gateway's samples, and the shadow worker's pass. The rest of beat (the
    controller's tick, the fleet's passes) does not run in the bench."""
    import threading

    from django.conf import settings

    from evals.tasks import ask_shadow_pairs, score_release_samples

    stop = threading.Event()
    every = {
        score_release_samples: max(1.0, settings.RELEASE_TICK_SECONDS / 2),
        ask_shadow_pairs: float(settings.RELEASE_SHADOW_SECONDS),
    }

    def beat() -> None:
        due = dict.fromkeys(every, 0.0)
        while not stop.wait(0.2):
            now = time.monotonic()
            for task, at in due.items():
                if now >= at:
                    task.delay()
                    due[task] = now + every[task]

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def measure(args: argparse.Namespace, engines: dict[str, EngineProcess], procs: list) -> Result:
    tiny = gs.tiny_model()
    # A core each: with only the compute threads bound, A's engine's API server (detokenizing 8
    # sequences at full speed) ran on B's engine's core: overtime p99 9.1 s via the gateway
    # (2026-12-01); unbound, both engines time-slice core 0.
    started, keys = gs.start_engines(
        tiny, VAR, ENGINE_NAMES, max_loras=2, max_cpu_loras=2, pinned=True
    )
    engines.update(started)
    db_url = os.environ.get("BENCH_NEIGHBOURS_DATABASE_URL", DEFAULT_DB_URL)
    redis_url = os.environ.get("BENCH_NEIGHBOURS_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys=keys)
    env["CELERY_TASK_DEFAULT_QUEUE"] = EVAL_QUEUE
    if args.live_headroom is not None:
        env["GATEWAY_LIVE_HEADROOM"] = str(args.live_headroom)
    gs.django_setup(env, db_url)
    for proc in engines.values():
        proc.wait_ready(timeout=gs.READY_TIMEOUT_S)
    tokens = seed(engines, tiny)
    phases = [p for p in args.phases.split(",") if p]
    if "eval" in phases:
        seed_eval(engines, keys, args.eval_cases)
    shadow = None
    if any(p in SHADOW_PHASES for p in phases):
        shadow = seed_shadow(engines, keys, args.a_rate, args.sample_share)
    if "eval" in phases or shadow:
        # The eval's and shadow pairs' worker: threads, as the bench's other workers
        # (gateway_support).
        procs.append(gs.start_worker(EVAL_QUEUE, [], VAR / "worker.log", env))
        if shadow:
            shadow.worker_pid = procs[-1].pid
    extra = {
        "GATEWAY_REQUEST_TIMEOUT_SECONDS": str(BUDGET_S),
        "GATEWAY_WRITE_DEADLINE_SECONDS": str(WRITE_DEADLINE_S),
        **ADDRESS_LIMIT,
    }
    gateway, base = gs.start_gateway(env, VAR / "gateway.log", cpus=None, extra=extra)
    procs.append(gateway)
    started_load = os.getloadavg()[0]
    result = Result(
        started_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=gs.machine_note(started_load, list(engines.values())),
        phase_seconds=args.phase_seconds,
        b_rate=args.b_rate,
        anon_rate=args.anon_rate,
        eval_cases=args.eval_cases,
        live_headroom=live_headroom(),
        repeat=args.repeat,
        a_rate=args.a_rate,
        sample_share=args.sample_share,
    )
    # Warm both engines and the gateway's tables.
    a, b = via_gateway(base, tokens["a"]), via_gateway(base, tokens["b"])
    asyncio.run(steady_b(b, 2.0, 5.0, 0))
    # The reference: the same traffic straight at the engines, in turn (no gateway, no limits):
    # what the engines themselves do to B under A's load.
    direct = [
        gs.Target(name, proc.base_url, "tiny-llama", {"authorization": f"Bearer {keys[name]}"})
        for name, proc in engines.items()
    ]
    # Repeated, the phases take turns (alone, eval, alone, eval, ...): drift of the machine
    # weighs on each alike, and a percentile over every turn's samples moves less than one's.
    # The lane phases through the gateway: A's load straight at the first engine, which the
    # gateway sees draining (B's requests go to the second only, as in the eval phase).
    runs = [
        (p, direct[:1] if p in LANE_PHASES else a, b, "gateway")
        for _ in range(args.repeat)
        for p in phases
    ]
    direct_phases = [p for p in args.direct_phases.split(",") if p]
    lanes = [p for p in direct_phases if p in LANE_PHASES]
    runs += [(p, direct, direct, "direct") for p in direct_phases if p not in LANE_PHASES]
    # A's load (if any) on the first engine, B on the second only, in turn as the gateway's.
    runs += [(p, direct[:1], direct[1:], "direct") for _ in range(args.repeat) for p in lanes]
    busy = Busy(eval_room(ENGINE_NAMES[0]))
    with shadow_beat() if shadow else contextlib.nullcontext():
        for i, run in enumerate(runs):
            result.phases.append(_one_phase(args, i, run, busy, shadow, result.phases))
    return result


def _one_phase(
    args: argparse.Namespace,
    i: int,
    run: tuple[str, list[gs.Target], list[gs.Target], str],
    busy: Busy,
    shadow: Shadow | None,
    done: list[PhaseResult],
) -> PhaseResult:
    phase, a_targets, b_targets, via = run
    if phase == "busy":
        busy.rate = eval_answer_rate(done, args.phase_seconds)
    lane = via == "gateway" and phase in LANE_PHASES
    if lane:
        _engine_state(ENGINE_NAMES[0], "draining")
        time.sleep(BUDGET_S)  # the gateway's tables follow the save (pub/sub)
    live = phase in SHADOW_PHASES and shadow is not None
    if live:  # A's plan lets its callers send the phase's rate (twice it, to spare)
        _tenant_rpm("tenant-a", max(A_RPM, round(args.a_rate * 60 * 2)))
        time.sleep(BUDGET_S)
    timeline = None
    if args.timeline:
        timeline = Timeline(
            list(ENGINE_NAMES),
            shadow.stable_served if shadow else "",
            shadow.candidate_served if shadow else "",
            shadow.worker_pid if shadow else None,
        )
    result = asyncio.run(
        run_phase(
            phase,
            a_targets,
            b_targets,
            args.phase_seconds,
            args.b_rate,
            i + 1,
            via,
            args.anon_rate,
            busy,
            shadow,
            timeline,
        )
    )
    if lane:
        _engine_state(ENGINE_NAMES[0], "up")
    if live:
        _tenant_rpm("tenant-a", A_RPM)
    print(json.dumps({**asdict(result), "b_ttfts_ms": "..."}), flush=True)
    time.sleep(BUDGET_S)  # what A left running ends before the next phase
    return result


def eval_room(name: str) -> int:
    """What an eval run keeps in flight on engine `name`: the gateway's own rule
    (gateway.lanes.background_room) on the engine as its tables hold it."""
    from gateway.lanes import background_room
    from gateway.routes import build_table

    return background_room(next(e for e in build_table(0).engines if e.name == name))


def _engine_state(name: str, state: str) -> None:
    """The state alone, saved (the gateway's tables follow saves): not the operator's drain,
    whose converge pass would unload the eval's candidate from the engine."""
    from workers.models import Engine

    engine = Engine.objects.get(name=name)
    engine.state = state
    engine.save()


def eval_answer_rate(phases: list[PhaseResult], seconds: float) -> float | None:
    """Answers a second the eval phases' runs reached: each case asks both sides."""
    done = [p.a_status.get("cases done", 0) for p in phases if p.name == "eval"]
    return 2 * sum(done) / (len(done) * seconds) if done else None


# --- the report ----------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} ms"


def pooled(phases: list[PhaseResult]) -> list[PhaseResult]:
    """One row per phase name that ran more than once: its turns' samples together."""
    rows = []
    for name in dict.fromkeys(p.name for p in phases):
        turns = [p for p in phases if p.name == name]
        if len(turns) > 1:
            rows.append(pool(turns))
    return rows


def pool(turns: list[PhaseResult]) -> PhaseResult:
    """Turns of one phase as one: every sample in its percentiles, every answer counted."""
    ttfts = [t for p in turns for t in p.b_ttfts_ms]
    status: Counter[str] = Counter()
    for p in turns:
        status.update(p.b_status)
    return PhaseResult(
        name=turns[0].name,
        b_ttft_p50_ms=gs.percentile(ttfts, 0.5) if ttfts else None,
        b_ttft_p99_ms=gs.percentile(ttfts, 0.99) if ttfts else None,
        b_requests=sum(p.b_requests for p in turns),
        b_status=dict(status),
        a_status={},
        via=turns[0].via,
        b_ttfts_ms=ttfts,
        b_where=[w for p in turns for w in p.b_where],
    )


def load_runs(paths: list[Path]) -> list[Result]:
    results = []
    for path in paths:
        data = json.loads(path.read_text())
        phases = [PhaseResult(**p) for p in data.pop("phases")]
        results.append(Result(**data, phases=phases))
    return results


def render_runs(results: list[Result]) -> str:
    """One row per phase (and way in) with every turn of every run pooled, against its quiet
    row (alone through the gateway, quiet for the lane phases); B's samples only."""
    rows: dict[tuple[str, str], list[PhaseResult]] = {}
    for result in results:
        for p in result.phases:
            rows.setdefault((p.via, p.name), []).append(p)
    together = {key: pool(turns) for key, turns in rows.items()}
    lines = [
        f"Every turn of {len(results)} runs ({', '.join(r.started_at for r in results)}), pooled:",
        "",
        "| phase | via | turns | B samples | B TTFT p50 | B TTFT p99 | p99 / its quiet row |",
        "|---|---|---|---|---|---|---|",
    ]
    for (via, name), p in together.items():
        quiet_name = "quiet" if name in LANE_PHASES or via == "direct" else "alone"
        quiet = together.get((via, quiet_name)) or together.get((via, "alone"))
        lines.append(
            f"| {name} | {via} | {len(rows[via, name])} | {len(p.b_ttfts_ms)} | "
            f"{_ms(p.b_ttft_p50_ms)} | {_ms(p.b_ttft_p99_ms)} | {_ratio(p, quiet)} |"
        )
    return "\n".join(lines) + "\n"


def _ratio(p: PhaseResult, base: PhaseResult | None) -> str:
    if base and base.b_ttft_p99_ms and p.b_ttft_p99_ms:
        return f"{p.b_ttft_p99_ms / base.b_ttft_p99_ms:.2f}x"
    return "-"


def _answers(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "-"


def _turns(result: Result) -> str:
    if result.repeat < 2:
        return ""
    return (
        f", the phases {result.repeat} times in turn, each eval phase's run ended before the next"
        " phase; the pooled rows take every turn's samples"
    )


def section_name(result: Result) -> str:
    """The whole bench writes "neighbours"; a run of some phases only writes a section of its
    own (named by them), so it never replaces the whole run's table."""
    gateway = (p.name for p in result.phases if p.via == "gateway")
    ran = [p for p in dict.fromkeys(gateway) if p not in LANE_PHASES]  # the lanes: a reference
    direct = [p.name for p in result.phases if p.via == "direct"]
    if ran == list(PHASES) and direct == ["alone", "overtime"]:
        return "neighbours"
    return "neighbours-" + "-".join(ran)


def render(result: Result, command: str, notes: list[str] | None = None) -> str:
    gateway = [p for p in result.phases if p.via == "gateway"]
    direct = [p for p in result.phases if p.via == "direct"]
    together = pooled(gateway)
    alone = next((p for p in together + gateway if p.name == "alone"), None)
    name = section_name(result)
    title = "## Noisy neighbours: tenant B while tenant A misbehaves (`make bench-neighbours`)"
    if name != "neighbours":
        title = (
            "## Noisy neighbours, phases "
            + ", ".join(dict.fromkeys(p.name for p in gateway))
            + " only (`bench.neighbours --phases`)"
        )
    lines = [
        f"<!-- {name}:begin -->",
        title,
        "",
        f"Run {result.started_at}; {result.machine}. Two CPU engines (tiny model, 8 sequences "
        f"each, a core each: each engine's whole process tree under `taskset`), one gateway; "
        f"both tenants call the base model. B: Poisson "
        f"{result.b_rate}/s short streams (max_tokens {B_BODY['max_tokens']}). A's plan: {A_RPM} "
        f"requests/min, {A_PLAN['max_in_flight_requests']} in flight, n <= {A_PLAN['max_n']}, "
        f"{A_PLAN['max_prompts']} prompts, max_tokens <= {A_PLAN['max_tokens']}. Gateway budget "
        f"{BUDGET_S:g} s, write deadline {WRITE_DEADLINE_S:g} s. {result.phase_seconds:g} s per "
        f"phase{_turns(result)}. Per-address limit {ADDRESS_LIMIT['GATEWAY_ADDRESS_RATE_PER_SECOND']}/s, bursts "
        f"of {ADDRESS_LIMIT['GATEWAY_ADDRESS_BURST']} (the production default); B sends from "
        f"127.0.0.1, the anonymous flood from {ANON_SOURCE} over {ANON_CONNECTIONS} keep-alive "
        "connections (`sent/s`: the rate it reached).",
        "",
        "| phase | A does | B TTFT p50 | B TTFT p99 | p99 / alone | B answers | A answers |",
        "|---|---|---|---|---|---|---|",
    ]
    what = {
        "alone": "nothing",
        "flood": f"{A_RPM * 10}/min (10x its limit)",
        "unread": "32 streams it never reads",
        "overtime": "requests past the budget",
        "largest": "the largest its plan allows",
        "anonymous": f"(anyone) {result.anon_rate:g}/s made-up tokens from {ANON_SOURCE}",
        "eval": f"(B's own) an eval run of {result.eval_cases} cases"
        + ("" if result.live_headroom is None else f", live headroom {result.live_headroom}"),
        "quiet": "nothing; the first engine drained (B on the second only)",
        "busy": "(anyone) the eval's load straight at the first engine, drained (B on the second)",
        "live": f"{result.a_rate:g}/s live requests to its stable version by name (no plan)",
        "shadow": f"{result.a_rate:g}/s live requests to its alias, its plan's shadow step at "
        f"{_pct(result.sample_share)}",
    }
    quiet = next((p for p in together + gateway if p.name == "quiet"), None)
    rows = [(p, what.get(p.name, ""), p.name) for p in gateway]
    rows += [(p, "all its turns, pooled", f"**{p.name}**") for p in together]
    for p, does, label in rows:
        base = quiet if p.name in LANE_PHASES else alone
        lines.append(
            f"| {label} | {does} | "
            f"{_ms(p.b_ttft_p50_ms)} | "
            f"{_ms(p.b_ttft_p99_ms)} | {_ratio(p, base)} | {_answers(p.b_status)} | "
            f"{_answers(p.a_status)} |"
        )
    lines += render_resolution(together, alone)
    lines += render_extra_work(result)
    lines += render_slow(result)
    if direct:
        lines += _reference(direct, gateway)
    for note in notes or []:
        lines += ["", note]
    lines += ["", f"Reproduce: `{command}`", "", f"<!-- {name}:end -->"]
    return "\n".join(lines) + "\n"


def _reference(direct: list[PhaseResult], gateway: list[PhaseResult]) -> list[str]:
    """The direct phases' table: each against its own quiet row (`alone`, or `quiet` for the
    lane phases), and B's p99 through the gateway in the matching phase against it."""
    both, lone = pooled(direct), pooled(gateway)
    lines = [
        "",
        "The reference: the same phases with both tenants' traffic sent straight to the "
        "engines in turn (no gateway, no limits): what the engines themselves do to B under "
        "A's load, the floor for any gateway that lets A's requests run."
        + (
            " `quiet` and `busy`: B straight at the second engine only, the first idle (quiet) or "
            "running what an eval run keeps in flight there (busy: short completions, at most "
            "the engine's sequences less the live headroom at once, at the rate the eval "
            "phases' runs answered); no gateway, worker or database runs: what one engine's "
            "compute costs the other's on this host."
            if any(p.name in LANE_PHASES for p in direct)
            else ""
        ),
        "",
        "| phase, no gateway | B TTFT p50 | B TTFT p99 | p99 / alone | B answers | A answers "
        "| B p99 via the gateway / here |",
        "|---|---|---|---|---|---|---|",
    ]
    twin = {"quiet": "alone", "busy": "eval"}  # the gateway phase each lane phase stands beside

    def first(rows: list[PhaseResult], name: str) -> PhaseResult | None:
        return next((p for p in rows if p.name == name), None)

    rows = [(p, p.name) for p in direct] + [(p, f"**{p.name}**, pooled") for p in both]
    for p, label in rows:
        pool = label.startswith("**")
        quiet = "quiet" if p.name in LANE_PHASES else "alone"
        base = first(both, quiet) if pool else None
        base = base or first(direct, quiet)
        # Beside the gateway's phase of the same name, else the one it stands for.
        ran = first(lone or gateway, p.name) is not None
        name = p.name if ran else twin.get(p.name, p.name)
        # A pooled row stands beside the gateway's pooled one (or its only turn); a turn, only
        # when nothing was pooled (one turn each).
        same = first(lone or gateway, name) if pool or not both else None
        lines.append(
            f"| {label} | {_ms(p.b_ttft_p50_ms)} | {_ms(p.b_ttft_p99_ms)} | "
            f"{_ratio(p, base)} | {_answers(p.b_status)} | {_answers(p.a_status)} | "
            f"{_ratio(same, p) if same else '-'} |"
        )
    return lines


@dataclass
class ExtraWork:
    """The work a shadow phase's plan added, against A's live requests."""

    label: str
    live: int  # A's requests answered 2xx
    sampled: int  # of them, the stable's answers the plan sampled (scored)
    asks: int  # candidate asks the shadow worker made
    judge: int  # judge calls (two orders a pair)
    skipped: int  # samples the shadow worker skipped (stale, budget, no room, backlog, error)
    engine_extra: int | None  # engine-counted requests less A's and B's answered ones

    def share(self, n: int) -> float | None:
        return n / self.live if self.live else None


def extra_work(phases: list[PhaseResult]) -> list[ExtraWork]:
    """Each shadow turn's extra work, then every turn's together when there are several."""
    rows = []
    for i, p in enumerate(p for p in phases if p.name == "shadow"):
        a = p.a_status
        engine = a.get("engine requests")
        rows.append(
            ExtraWork(
                label=f"turn {i + 1}",
                live=sum(v for k, v in a.items() if k.startswith("2") and k.isdigit()),
                sampled=a.get("sampled", 0),
                asks=a.get("candidate asks", 0),
                judge=a.get("judge calls", 0),
                skipped=sum(v for k, v in a.items() if k.startswith("skipped ")),
                engine_extra=None
                if engine is None
                else engine
                - sum(v for k, v in a.items() if k.startswith("2") and k.isdigit())
                - p.b_status.get("200", 0),
            )
        )
    if len(rows) > 1:
        engine_rows = [r.engine_extra for r in rows]
        rows.append(
            ExtraWork(
                label="**all turns**",
                live=sum(r.live for r in rows),
                sampled=sum(r.sampled for r in rows),
                asks=sum(r.asks for r in rows),
                judge=sum(r.judge for r in rows),
                skipped=sum(r.skipped for r in rows),
                engine_extra=None
                if None in engine_rows
                else sum(r.engine_extra or 0 for r in rows),
            )
        )
    return rows


def share_range(share: float, n: int) -> tuple[float, float]:
    """Where sampling alone puts `n` requests' sampled share 95 % of the time (normal
    approximation of the binomial)."""
    half = 1.96 * (share * (1 - share) / n) ** 0.5 if n else 1.0
    return max(0.0, share - half), min(1.0, share + half)


def p99_interval(
    samples: list[float], base: list[float], draws: int = 2000, seed: int = 1
) -> tuple[float, float]:
    """The 95 % bootstrap interval of p99(samples) / p99(base), each resampled with
    replacement: what the ratio of two p99s of that many samples can tell apart."""
    rng = random.Random(seed)
    ratios = sorted(
        gs.percentile(rng.choices(samples, k=len(samples)), 0.99)
        / gs.percentile(rng.choices(base, k=len(base)), 0.99)
        for _ in range(draws)
    )
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def render_resolution(together: list[PhaseResult], alone: PhaseResult | None) -> list[str]:
    """Each pooled phase's p99 against alone's with its bootstrap interval, and alone's against
    itself: a ratio inside alone's own interval is not told apart from 1.00x by this run."""
    if alone is None or len(alone.b_ttfts_ms) < 100 or not together:
        return []
    own = p99_interval(alone.b_ttfts_ms, alone.b_ttfts_ms)
    parts = [
        f"{p.name} {_ratio(p, alone)} ({lo:.2f}-{hi:.2f}x)"
        for p in together
        if p.name != "alone" and len(p.b_ttfts_ms) >= 100
        for lo, hi in [p99_interval(p.b_ttfts_ms, alone.b_ttfts_ms)]
    ]
    return [
        "",
        "B's pooled p99 against alone's, with the 95 % interval of 2,000 bootstrap draws of both "
        "phases' samples: " + "; ".join(parts) + f". Alone against itself: {own[0]:.2f}-"
        f"{own[1]:.2f}x, the resolution of a p99 ratio over {len(alone.b_ttfts_ms)} samples.",
    ]


def render_slow(result: Result) -> list[str]:
    """--timeline: where B's requests above alone's pooled p99 ran in each phase, and what ran
    beside them while they waited for their first token."""
    gateway = [p for p in result.phases if p.via == "gateway"]
    if not any(p.b_where for p in gateway):
        return []
    together = {p.name: p for p in pooled(gateway)} or {p.name: p for p in gateway}
    alone = together.get("alone")
    if alone is None or alone.b_ttft_p99_ms is None:
        return []
    bar = alone.b_ttft_p99_ms
    lines = [
        "",
        f"Where B's requests above alone's pooled p99 ({bar:.0f} ms) ran, every turn pooled "
        "(`--timeline`: each engine's requests in flight read every 10 ms; shadow work: a "
        "candidate ask or a judge call in the background lane; worker: its CPU while they "
        "waited, in cores, against its phase mean). B's requests by engine and the share of the "
        "phase with shadow work on each engine are over every turn.",
        "",
        "| phase | B above | on nb-a / nb-b / both / unseen | shadow work on its engine | "
        "a judge call on its engine | shadow work on the other engine only | during a pass "
        "| worker cores (phase) | B's requests by engine | shadow work's share of time "
        "| A's live requests' share of time |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in together.items():
        slow = [Slow(*w) for t, w in zip(p.b_ttfts_ms, p.b_where, strict=True) if t > bar]
        turns = [q for q in gateway if q.name == name and q.timeline]
        by: Counter[str] = Counter()
        share: Counter[str] = Counter()
        a_share: Counter[str] = Counter()
        for q in turns:
            by.update(q.timeline.get("b_on", {}))
            share.update(q.timeline.get("background_share", {}))
            a_share.update(q.timeline.get("a_live_share", {}))
        mean = sum(q.timeline.get("worker_cores", 0) for q in turns) / max(1, len(turns))
        where = Counter(s.engine for s in slow)
        cores = sum(s.worker_cores for s in slow) / len(slow) if slow else 0.0
        lines.append(
            f"| {name} | {len(slow)} of {len(p.b_ttfts_ms)} | "
            + " / ".join(str(where.get(k, 0)) for k in (*ENGINE_NAMES, "both", "?"))
            + f" | {sum(s.background_there for s in slow)} | {sum(s.judge_there for s in slow)} "
            f"| {sum(s.background_elsewhere for s in slow)} | {sum(s.pass_running for s in slow)} "
            f"| {cores:.2f} ({mean:.2f}) | "
            + ", ".join(f"{k}: {v}" for k, v in sorted(by.items()))
            + " | "
            + ", ".join(f"{k}: {v / max(1, len(turns)):.1%}" for k, v in sorted(share.items()))
            + " | "
            + ", ".join(f"{k}: {v / max(1, len(turns)):.1%}" for k, v in sorted(a_share.items()))
            + " |"
        )
    return lines


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def render_extra_work(result: Result) -> list[str]:
    """The shadow phase's extra engine work against the goal: the sample share within 10 % of
    it, read as candidate asks / A's live requests; with the judge's calls, and what the
    engines' own counters saw, beside it."""
    rows = extra_work(result.phases)
    if not rows:
        return []
    share = result.sample_share
    low, high = 0.9 * share, 1.1 * share
    lines = [
        "",
        f"The extra engine work of the shadow phase (A: {result.a_rate:g} requests/s to its "
        f"alias, the plan's sample share {_pct(share)}; goal: candidate asks / A's live requests "
        f"between {_pct(low)} and {_pct(high)}). Judge calls: two a pair (both orders). Engines' "
        "count: every request the engines' own counters finished in the phase (and while the "
        "worker finished its samples after it) less A's and B's answered ones. Asks / sampled: "
        "what the portal asked of what the gateway sampled (skips lower it). Sampling's range: "
        "where the share of A's requests the gateway samples falls 95 % of the time by chance "
        "alone, for that many requests.",
        "",
        "| shadow | A live | sampled | candidate asks | judge calls | skipped | asks / sampled "
        "| asks / live | (asks + judge) / live | engines' extra / live | sampling's range | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        asks = r.share(r.asks)
        lo, hi = share_range(share, r.live)
        met = "-" if asks is None else ("met" if low <= asks <= high else "not met")
        engine = (
            "-" if r.engine_extra is None else f"{r.engine_extra} ({_pct(r.share(r.engine_extra))})"
        )
        lines.append(
            f"| {r.label} | {r.live} | {r.sampled} | {r.asks} | {r.judge} | {r.skipped} | "
            f"{_pct(r.asks / r.sampled if r.sampled else None)} | {_pct(asks)} | "
            f"{_pct(r.share(r.asks + r.judge))} | {engine} | "
            f"{_pct(lo)}-{_pct(hi)} | {met} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--phase-seconds", type=float, default=40.0)
    parser.add_argument("--b-rate", type=float, default=2.0)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument(
        "--anon-rate", type=float, default=1000.0, help="made-up tokens a second (anonymous)"
    )
    parser.add_argument(
        "--eval-cases", type=int, default=500, help="the eval phase's suite (cases, two sides)"
    )
    parser.add_argument(
        "--live-headroom",
        type=int,
        default=None,
        help="GATEWAY_LIVE_HEADROOM for the gateway and the eval's worker (default: the setting's)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the gateway phases this many times in turn and pool each phase's samples",
    )
    parser.add_argument(
        "--pool-runs",
        nargs="?",
        const=str(RUNS),
        metavar="DIR",
        help="no measuring: every phase's samples over all the runs kept in DIR (by default "
        f"var/bench/{RUNS.name}, where every run leaves its result), pooled",
    )
    parser.add_argument(
        "--direct-phases",
        default="alone,overtime",
        help="phases run again with both tenants straight at the engines (the reference)",
    )
    parser.add_argument(
        "--a-rate",
        type=float,
        default=2.0,
        help="A's live requests a second in the live and shadow phases (its plan raised for them)",
    )
    parser.add_argument(
        "--sample-share",
        type=float,
        default=SHADOW_SHARE,
        help="the shadow phase's plan's sample share",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="read each engine's requests in flight every 10 ms and report where B's requests "
        "above alone's p99 ran and what ran beside them (bench/neighbours_timeline.py)",
    )
    add_report_arguments(parser, keep_db=False)
    args = parser.parse_args()
    if args.pool_runs:
        print(render_runs(load_runs(sorted(Path(args.pool_runs).glob("*.json")))))
        return
    if args.render_only:
        (result,) = load_runs([VAR / "result.json"])
        section = render(result, args.render_only, args.note)
        print(section)
        if args.write_docs:
            write_section(section_name(result), section)
        return
    random.seed(1)
    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir(parents=True)
    engines: dict[str, EngineProcess] = {}
    procs: list = []
    try:
        with gs.sigterm_runs_cleanup():
            result = measure(args, engines, procs)
    finally:
        for proc in procs:
            gs.stop_group(proc)
        stop_engines(list(engines.values()))
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2))
    RUNS.mkdir(parents=True, exist_ok=True)
    stamp = result.started_at.replace(" UTC", "").replace(" ", "T").replace(":", "")
    (RUNS / f"{stamp}.json").write_text(json.dumps(asdict(result)))
    command = " ".join([".venv/bin/python -m bench.neighbours", *sys.argv[1:]])
    section = render(result, command, args.note)
    print(section)
    if args.write_docs:
        write_section(section_name(result), section)


if __name__ == "__main__":
    main()

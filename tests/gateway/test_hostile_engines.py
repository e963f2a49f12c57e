"""The gateway under hostile callers, on real engines (docs/security.md, section 13): base-model
calls are limited, billed and pooled as the caller's tenant; a request is charged by its weight;
a tenant's prompts never hit another tenant's prefix cache; a request over its budget is a 504
aborted at the engine; an engine's 4xx passes back as it is, blames no engine and is no error of
the version (automatic rollback); a stream nobody reads is cut off and its slots come back; the
tenant's in-flight cap holds across two replicas; the first request after an engine restart
succeeds."""

from __future__ import annotations

import datetime
import threading
import time

import pytest

from adapters.access import AccessContext
from adapters.services.releases import Guard, canary_series, canary_verdict, window_minutes
from tenants.services.tokens import token_issue
from tests.gateway.hostile_support import (
    chat,
    complete,
    engine_counter,
    one_engine_fixture,  # noqa: F401 - fixture
    past_the_sharing_window,
    paused_engine,
    redis_int,
    replicas_fixture,  # noqa: F401 - fixture
    room_in_this_minute,
    unread_stream,
    wait_for,
)
from tests.workers.fleet import servable_version
from workers import shared_state
from workers.controller import converge_engine
from workers.desired import set_desired

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
# Long enough for several of the engine's KV-cache blocks, well inside its 1024-token context.
LONG_PROMPT = " ".join(f"word{i % 97} tea{i % 13}" for i in range(60))
# 8 sequences of 1000 tokens: several seconds on the tiny CPU model (about 6 s on an idle box).
HEAVY = {"n": 8, "max_tokens": 1000, "ignore_eos": True, "temperature": 1.0}
# 16 prompts, 32 sequences each (a plan raised for it): 512,000 tokens, minutes of work, far
# past the replicas' budget (60 s).
OVER_BUDGET = {"prompt": ["tea"] * 16, **HEAVY, "n": 32}


def token(world, user: str, tenant) -> str:
    access = AccessContext.for_user(world.users[user])
    return token_issue(access=access, scopes=["inference"], tenant=tenant).plaintext


def _save(tenant, **fields) -> None:
    for name, value in fields.items():
        setattr(tenant, name, value)
    tenant.save()  # a save: the gateways' tables follow saves


def test_base_model_calls_are_limited_billed_and_pooled_as_the_tenant(worker_fleet, replicas):
    from tests.gateway.hostile_support import clear_gateway_counts

    clear_gateway_counts()
    world = worker_fleet.world
    worker_fleet.b.pool = "dedicated"
    worker_fleet.b.save()
    _save(world.acme, pool="dedicated", quota_requests_per_minute=3)
    alice = token(world, "alice", world.acme)
    charlie = token(world, "charlie", world.globex)
    on_a = engine_counter(worker_fleet.handle_a, "vllm:request_success_total")
    on_b = engine_counter(worker_fleet.handle_b, "vllm:request_success_total")

    room_in_this_minute()  # the four below counted in one minute
    replies = [chat(replicas[0], alice, {"model": "tiny-llama", "max_tokens": 2}) for _ in range(4)]
    assert [r.status_code for r in replies] == [200, 200, 200, 429]
    assert replies[3].json()["error"]["code"] == "rate_limit_exceeded"
    assert chat(replicas[1], charlie, {"model": "tiny-llama", "max_tokens": 2}).status_code == 200
    # acme's three ran in its dedicated pool (engine B), globex's one in the shared pool (A).
    assert engine_counter(worker_fleet.handle_b, "vllm:request_success_total") - on_b == 3
    assert engine_counter(worker_fleet.handle_a, "vllm:request_success_total") - on_a == 1
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    acme, globex = (
        f"{world.acme.id}|0|{world.acme.slo_class}",
        f"{world.globex.id}|0|{world.globex.slo_class}",
    )
    assert wait_for(lambda: redis_int(f"lp:usage:{day}", f"{acme}|requests") == 3)
    assert wait_for(lambda: redis_int(f"lp:usage:{day}", f"{globex}|requests") == 1)
    assert redis_int(f"lp:usage:{day}", "0|0|requests") == 0  # nothing billed to no tenant


def test_a_request_is_charged_by_the_sequences_it_runs(one_engine, replicas):
    world = one_engine.world
    _save(world.acme, quota_requests_per_minute=5)
    alice = token(world, "alice", world.acme)
    heavy = {"model": "tiny-llama", "prompt": ["a", "b"], "n": 2, "max_tokens": 1}
    room_in_this_minute()  # the three below counted in one minute
    assert complete(replicas[0], alice, heavy).status_code == 200  # weight 4
    light = {"model": "tiny-llama", "max_tokens": 1}
    assert chat(replicas[1], alice, light).status_code == 200  # weight 1: 5 in all
    refused = chat(replicas[0], alice, light)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"


def test_one_tenants_prompt_does_not_hit_another_tenants_prefix_cache(one_engine, replicas):
    world = one_engine.world
    handle = one_engine.handle_a
    body = {"model": "tiny-llama", "prompt": LONG_PROMPT, "max_tokens": 1}
    alice, charlie = token(world, "alice", world.acme), token(world, "charlie", world.globex)

    def hits_of(tok: str) -> float:
        before = engine_counter(handle, "vllm:prefix_cache_hits_total")
        assert complete(replicas[0], tok, body).status_code == 200
        return engine_counter(handle, "vllm:prefix_cache_hits_total") - before

    hits_of(alice)
    assert hits_of(alice) > 0  # the same tenant's second prompt hits its own cache
    assert hits_of(charlie) == 0  # another tenant's identical prompt finds nothing


def test_a_request_over_its_budget_is_a_504_aborted_at_the_engine_blaming_no_engine(
    one_engine, replicas
):
    world = one_engine.world
    handle = one_engine.handle_a
    # Its weight (512 sequences) is charged against the rate too: a raised quota, or the
    # requests earlier tests made this minute refuse it as over the rate (429).
    _save(world.acme, max_n=32, quota_requests_per_minute=100_000)
    alice = token(world, "alice", world.acme)
    generated = engine_counter(handle, "vllm:generation_tokens_total")
    past_the_sharing_window()  # 512 sequences: more than a shared engine's share
    reply = complete(replicas[0], alice, {"model": "tiny-llama", **OVER_BUDGET})
    assert reply.status_code == 504, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["error"]["code"] == "request_timeout"
    # Aborted at the engine: it stops running, far short of the 512,000 tokens asked for.
    assert wait_for(lambda: engine_counter(handle, "vllm:num_requests_running") == 0)
    assert engine_counter(handle, "vllm:generation_tokens_total") - generated < 512_000
    # No engine was marked: the only engine serves the next request at once, on both replicas.
    for base in replicas:
        assert chat(base, alice, {"model": "tiny-llama", "max_tokens": 2}).status_code == 200
    # A timeout of a well-formed request is the engine's error (it counts for rollback).
    assert wait_for(lambda: redis_int("lp:gwm:counters", "acme||tiny-llama|errors") == 1)


def test_an_engine_4xx_passes_back_as_it_is_and_is_no_error_of_the_version(
    one_engine, replicas, tmp_path
):
    world = one_engine.world
    version = servable_version(world.support, tmp_path, seed=401)
    set_desired(
        version=version, engine=one_engine.a, state="registered", reason="t", converge=False
    )
    converge_engine(one_engine.a)
    alice = token(world, "alice", world.acme)
    # Well-formed for the gateway, refused by the engine's own checks: vLLM answers 400.
    refused_by_engine = {"model": "support", "prompt": "tea", "max_tokens": 2, "temperature": -1}
    for _ in range(6):
        refused = complete(replicas[0], alice, refused_by_engine)
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert (error["type"], error["param"]) == ("BadRequestError", "temperature")  # vLLM's
    ok = complete(replicas[0], alice, {**refused_by_engine, "temperature": 0})
    assert ok.status_code == 200
    label = f"support@{version.number}"
    assert wait_for(lambda: redis_int("lp:gwm:counters", f"acme|support|{label}|rejected") == 6)
    assert redis_int("lp:gwm:counters", f"acme|support|{label}|errors") == 0
    # What the automatic rollback reads: 7 requests, no error, so the canary is kept. (The
    # recorder sends its batches on its own beat: the 200 may land after the 400s.)
    guard = Guard(max_error_rate=0.1, max_ttft_ms=None, min_requests=3, window_minutes=5)

    def verdict():
        now = time.time()
        minutes = window_minutes(now=now + 60, window=5, since=now - 300)
        series = canary_series(
            shared_state.client(), tenant="acme", adapter="support", version=label, minutes=minutes
        )
        return canary_verdict(series, guard)

    assert wait_for(lambda: verdict().requests == 7)
    seen = verdict()
    assert (seen.requests, seen.errors, seen.rollback) == (7, 0, False)


def test_a_stream_nobody_reads_is_cut_off_and_its_slots_come_back(one_engine, replicas):
    import orjson

    world = one_engine.world
    _save(world.acme, max_in_flight_requests=1, quota_requests_per_minute=100_000)
    alice = token(world, "alice", world.acme)
    # Big events (20 top logprobs each), so the socket's buffers fill within a few tokens.
    body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    body |= {**HEAVY, "logprobs": True, "top_logprobs": 20}
    past_the_sharing_window()  # 8 sequences: more than a shared engine's share
    sock = unread_stream(replicas[0], alice, orjson.dumps(body))
    try:
        assert wait_for(lambda: redis_int(f"lp:gw:tflight:{world.acme.id}") == 8)
        # The caller holds its socket open and reads nothing; the gateway gives up on it.
        assert wait_for(lambda: redis_int(f"lp:gw:tflight:{world.acme.id}") == 0)
        # Cut off as a slow reader (the caller's fault), not by the request's time budget.
        assert wait_for(lambda: redis_int("lp:gwm:counters", "acme||tiny-llama|rejected") == 1)
        assert redis_int("lp:gwm:counters", "acme||tiny-llama|errors") == 0
        # Billed what it streamed before it was cut off, not nothing.
        day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        usage = f"lp:usage:{day}"
        billed = f"{world.acme.id}|0|{world.acme.slo_class}"  # its tenant's service class
        assert wait_for(lambda: redis_int(usage, f"{billed}|requests") == 1)
        assert redis_int(usage, f"{billed}|out") > 0
        assert wait_for(
            lambda: engine_counter(one_engine.handle_a, "vllm:num_requests_running") == 0
        )
        # The tenant's one slot is free again, on either replica.
        assert chat(replicas[1], alice, {"model": "tiny-llama", "max_tokens": 2}).status_code == 200
    finally:
        sock.close()


def test_the_tenants_in_flight_cap_holds_across_replicas(one_engine, replicas):
    world = one_engine.world
    _save(world.acme, max_in_flight_requests=2, quota_requests_per_minute=100_000)
    alice = token(world, "alice", world.acme)
    flight = f"lp:gw:tflight:{world.acme.id}"
    assert wait_for(lambda: redis_int(flight) == 0)
    answers: list[int] = []
    first = threading.Thread(
        target=lambda: answers.append(
            chat(replicas[0], alice, {"model": "tiny-llama", "max_tokens": 2, "n": 2}).status_code
        )
    )
    # The engine paused: the first request (weight 2, the tenant's whole cap) stays in flight
    # on replica 1 for as long as the check takes. (A stream read from the caller's side could
    # have ended at the gateway, its tail in the sockets' buffers, before the check: CI.)
    with paused_engine(one_engine.handle_a):
        first.start()
        assert wait_for(lambda: redis_int(flight) == 2)
        refused = chat(replicas[1], alice, {"model": "tiny-llama", "max_tokens": 2})
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "tenant_concurrency_limit_exceeded"
        assert refused.headers["retry-after"] == "1"
    first.join()
    assert answers == [200]
    assert chat(replicas[1], alice, {"model": "tiny-llama", "max_tokens": 2}).status_code == 200


def test_a_request_naming_no_max_tokens_generates_at_most_the_plans_cap(one_engine, replicas):
    """Absent or null, `max_tokens` (and chat's `max_completion_tokens`) means the plan's cap:
    with `ignore_eos` the engine would otherwise generate up to its context length."""
    world = one_engine.world
    _save(world.acme, max_tokens=5, quota_requests_per_minute=100_000)
    alice = token(world, "alice", world.acme)
    endless = {"model": "tiny-llama", "ignore_eos": True}
    asks = [
        (chat, endless),
        (chat, {**endless, "max_tokens": None}),
        (chat, {**endless, "max_completion_tokens": None}),
        (complete, {**endless, "prompt": "tea"}),
        (complete, {**endless, "prompt": "tea", "max_tokens": None}),
    ]
    for send, body in asks:
        reply = send(replicas[0], alice, body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 5, body


def test_a_huge_tool_definition_is_refused_by_the_prompt_size_limit(one_engine, replicas):
    """The prompt-size bound counts what the model is given besides message text."""
    world = one_engine.world
    _save(world.acme, max_prompt_bytes=2000, quota_requests_per_minute=100_000)
    alice = token(world, "alice", world.acme)
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "tea " * 1000,
            "parameters": {"type": "object", "properties": {}},
        },
    }
    reply = chat(replicas[0], alice, {"model": "tiny-llama", "max_tokens": 2, "tools": [tool]})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["code"], error["param"]) == ("over_plan_limit", "prompt")
    assert chat(replicas[0], alice, {"model": "tiny-llama", "max_tokens": 2}).status_code == 200


def _served_again(engine, version, since) -> bool:
    """The fleet shows the engine up and the version resident on it, observed since `since`."""
    from workers.models import Engine, EngineState, Residency, ResidencyState

    row = Residency.objects.filter(engine=engine, version=version).first()
    return (
        Engine.objects.get(pk=engine.pk).state == EngineState.UP
        and row is not None
        and row.observed_state
        in (ResidencyState.RESIDENT_GPU, ResidencyState.RESIDENT_CPU, ResidencyState.PINNED)
        and row.observed_at is not None
        and row.observed_at >= since
    )


def test_the_first_request_once_the_fleet_shows_a_restarted_engine_is_served(
    worker_fleet, tmp_path, engine_control, celery_beat_process, celery_worker_process
):
    """As a new user tries it with the official client: the engine is restarted (the user's
    chat meanwhile fails), the fleet brings the version back unasked, and the next chat, sent
    the moment the fleet shows it, is answered. The gateway's own mark on the engine (its chat
    could not connect) holds only until the fleet has seen the engine answer again. The gateways
    here keep a mark longer than any restart, so only the fleet's word can lift it; both hold
    pooled connections from before the restart, which the first chat after it must not meet."""
    import openai
    from django.utils import timezone

    from tests.fixtures.gateway import running_gateway
    from tests.workers.fleet import servable_version

    world = worker_fleet.world
    worker_fleet.b.state = "draining"  # engine A alone serves (the prober leaves B alone)
    worker_fleet.b.save()
    version = servable_version(world.support, tmp_path, seed=451)
    set_desired(version=version, engine=worker_fleet.a, state="registered", reason="t")
    converge_engine(worker_fleet.a)
    alice = token(world, "alice", world.acme)
    env = {"GATEWAY_REFRESH_SECONDS": "0", "GATEWAY_ENGINE_COOLDOWN_SECONDS": "3600"}
    queue = celery_worker_process["queue"]
    # Two replicas, each holding pooled connections to the engine from before its restart: the
    # first one's chat meets the stopped engine and marks it; the second learns of it only
    # from the fleet. Both must answer the first chat once the fleet shows the version again.
    with running_gateway(queue, **env) as first, running_gateway(queue, **env) as second:
        clients = [
            openai.OpenAI(base_url=base + "/v1", api_key=alice)  # its own retries
            for base in (first, second)
        ]

        def ask(on: openai.OpenAI) -> str:
            reply = on.chat.completions.create(
                model="support", messages=[{"role": "user", "content": "tea"}], max_tokens=2
            )
            return reply.model

        assert [ask(c) for c in clients] == [version.served_name] * 2
        engine_control.stop(worker_fleet.handle_a)
        with pytest.raises(openai.APIStatusError):  # the engine is away: no answer to give
            ask(clients[0].with_options(max_retries=0))
        engine_control.start(worker_fleet.handle_a)
        back_at = timezone.now()
        assert wait_for(lambda: _served_again(worker_fleet.a, version, back_at), within_s=240)
        assert [ask(c) for c in clients] == [version.served_name] * 2

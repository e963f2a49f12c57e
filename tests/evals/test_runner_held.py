"""An eval run behind live traffic (docs/decisions/0011-live-headroom.md): while live requests
hold the slots every engine keeps for them, each of the run's background requests is refused at
admission (503 `held_for_live_traffic`, holding nothing), and the runner waits and asks again
(evals.services.asking: `HELD`, `HELD_WAIT_S`); once the live load ends, every case is answered
once and none failed. A side held past its deadline fails with that reason, and the run goes on.

The session's two real engines and the real Redis. The live load is another gateway replica's
live requests as the admission script counts them (gateway.limits, live lane): admitted on both
engines before the run starts and held until the test ends them, so the run is refused for as
long as the test decides, not for as long as some answers happen to take."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from evals.models import EvalCaseResult, EvalRun
from evals.services import asking
from evals.services.asking import HELD, Answer, Asker, Side
from gateway import limits
from tests.evals.runs import gated_run_held_back
from tests.faults.record import wait_until
from tests.workers.conftest import worker_fleet  # noqa: F401 - fixture
from workers import shared_state
from workers.models import Engine
from workers.redis_contract.keys import load_key

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

CASES = [{"id": f"c{i}", "prompt": f"Count to {i}.", "max_tokens": 6} for i in range(6)]


class LiveLoad:
    """Live requests of another replica in flight on `engines`: `per_engine` base-model requests
    each, admitted in the live lane of every engine's load hash by the admission script, until
    `end`. Its own event loop and Redis client (the test itself is synchronous)."""

    def __init__(self, engines: list[Engine], per_engine: int, tenant_id: int) -> None:
        self.engines = engines
        self.per_engine = per_engine
        self.tenant_id = tenant_id
        self.loop = asyncio.new_event_loop()
        self.redis: aioredis.Redis | None = None
        self.held: list[limits.Admission] = []

    def start(self) -> None:
        self.loop.run_until_complete(self._admit())

    def end(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.run_until_complete(self._release())
        finally:
            self.loop.close()

    async def _admit(self) -> None:
        self.redis = aioredis.Redis.from_url(settings.REDIS_URL)
        scripts = limits.Scripts(self.redis)
        for engine in self.engines:
            for _ in range(self.per_engine):
                admission = limits.Admission(
                    scripts,
                    limits.Terms(
                        tenant_id=self.tenant_id,
                        rpm_limit=0,
                        target=None,
                        requested=engine.served_model_name,
                        background=False,
                        live_headroom=settings.GATEWAY_LIVE_HEADROOM,
                    ),
                )
                await admission.admit(
                    engine.name, max_loras=engine.max_loras, capacity=engine.max_num_seqs
                )
                self.held.append(admission)

    async def _release(self) -> None:
        for admission in self.held:
            await admission.release()
        self.held.clear()
        if self.redis is not None:
            await self.redis.aclose()


def _load(engine: Engine) -> dict[str, int]:
    raw = shared_state.client().hgetall(load_key(engine.name))
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


class AskLog:
    """Every answer the runner had from the gateway, in order: (side, prompt, error code)."""

    def __init__(self, monkeypatch: Any) -> None:
        self.answers: list[tuple[str, str, str]] = []
        ask_once = Asker._ask_once

        async def recorded(asker: Asker, side: Side, payload: dict[str, Any]) -> Answer:
            answer = await ask_once(asker, side, payload)
            code = answer.error.split(":", 1)[0] if answer.error else ""
            self.answers.append((side.name, str(payload.get("prompt", "")), code))
            return answer

        monkeypatch.setattr(Asker, "_ask_once", recorded)

    def held(self) -> Counter[str]:
        """How many times each side was refused for live traffic."""
        return Counter(side for side, _, code in list(self.answers) if code == HELD)

    def answered(self) -> Counter[tuple[str, str]]:
        """How many answers (not refusals) each (side, prompt) had."""
        return Counter((side, prompt) for side, prompt, code in list(self.answers) if code != HELD)


@pytest.fixture
def live_load(worker_fleet):  # noqa: F811 - fixture
    """The headroom of both engines taken by live requests (GATEWAY_LIVE_HEADROOM each): a
    background request finds them busy past what it may take beside the headroom."""
    fleet = worker_fleet
    load = LiveLoad(
        [fleet.a, fleet.b], settings.GATEWAY_LIVE_HEADROOM, tenant_id=fleet.world.globex.pk
    )
    load.start()
    try:
        yield load
    finally:
        load.end()


def _failed_by_reason(rows: list[EvalCaseResult]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        if row.error:
            reason = row.error.split(":", 1)[0].strip()
            counts.setdefault(row.side, {})[reason] = counts.get(row.side, {}).get(reason, 0) + 1
    return counts


def test_a_run_held_for_live_traffic_waits_and_finishes_once_it_ends(
    worker_fleet,  # noqa: F811 - fixture
    live_load,
    tmp_path,
    monkeypatch,
):
    from evals.services import runner

    fleet = worker_fleet
    headroom = settings.GATEWAY_LIVE_HEADROOM
    assert headroom > 0 and fleet.a.max_num_seqs - headroom < headroom  # live load > what's left
    run = gated_run_held_back(fleet.world, monkeypatch, tmp_path, CASES, seed=21)
    log = AskLog(monkeypatch)
    ended: list[EvalRun | None] = []
    thread = threading.Thread(
        target=lambda: ended.append(runner.run_execute(run.pk, "held")), daemon=True
    )
    thread.start()

    # Both sides refused and asked again (each at least twice), while the live load stays.
    wait_until(
        lambda: len(log.held()) == 2 and min(log.held().values()) >= 2,
        timeout=240,
        what="both sides held for live traffic and asked again",
    )
    assert not log.answered(), log.answered()  # nothing went through meanwhile
    assert EvalRun.objects.get(pk=run.pk).cases_done == 0
    assert not EvalCaseResult.objects.filter(run=run).exists()
    # Refused whole: the engines' load holds the live requests only, no background one.
    for engine in (fleet.a, fleet.b):
        assert _load(engine) == {"live": headroom}, engine.name

    live_load.end()  # the live requests finish
    thread.join(timeout=300)
    assert not thread.is_alive(), "the run did not end"

    finished = EvalRun.objects.get(pk=run.pk)
    assert ended and ended[0] is not None
    assert finished.status == "finished", finished.error
    rows = list(EvalCaseResult.objects.filter(run=run))
    assert sorted((r.case_id, r.side) for r in rows) == sorted(
        (c["id"], s) for c in CASES for s in ("candidate", "baseline")
    )
    assert all(r.answer and not r.error for r in rows), [r.error for r in rows]
    assert finished.cases_done == len(CASES) and finished.summary["failed"] == {}
    # Each side of each case was answered once: asked again only while it was held.
    assert set(log.answered().values()) == {1} and len(log.answered()) == 2 * len(CASES)
    for engine in (fleet.a, fleet.b):
        assert _load(engine) == {}, engine.name  # every count given back


def test_a_side_held_past_its_deadline_fails_with_the_reason(
    worker_fleet,  # noqa: F811 - fixture
    live_load,
    tmp_path,
    monkeypatch,
):
    from evals.services import runner

    fleet = worker_fleet
    run = gated_run_held_back(fleet.world, monkeypatch, tmp_path, CASES, seed=22)
    log = AskLog(monkeypatch)
    monkeypatch.setattr(asking, "HELD_WAIT_S", 2.0)  # the live load outlasts it

    finished = runner.run_execute(run.pk, "held-deadline")

    assert finished is not None and finished.status == "finished", finished and finished.error
    assert not finished.error  # the run itself did not fail: its sides did
    rows = list(EvalCaseResult.objects.filter(run=run))
    assert len(rows) == 2 * len(CASES)
    for row in rows:
        code, _, message = row.error.partition(":")
        assert code == HELD and "kept for live requests" in message, row.error
    held = {"held_for_live_traffic": len(CASES)}
    assert finished.summary["failed"] == {"candidate": held, "baseline": held}
    assert _failed_by_reason(rows) == finished.summary["failed"]
    # Each side waited and asked again before it gave up, and nothing was ever answered.
    assert len(log.held()) == 2 and min(log.held().values()) > len(CASES), log.held()
    assert not log.answered()
    for engine in (fleet.a, fleet.b):
        assert _load(engine) == {"live": settings.GATEWAY_LIVE_HEADROOM}, engine.name

"""Where B's slow requests come from (bench.neighbours --timeline): what ran on each engine, and
the worker's CPU, while each of B's requests waited for its first token.

A thread reads every TICK_S, in one Redis round trip, each engine's requests in flight as the
gateway's admission counts them (workers.redis_contract.keys: the lanes' weights, and A's stable
and candidate versions' requests by served name), whether a shadow pass runs (its lock), and the
worker's CPU time (/proc). A request of B's is on the engine where a live base-model request was
in flight during its wait: the live lane less A's stable version's requests (B is the only
tenant calling the base model live; the judge's calls are background, and so are the
candidate's). Reading Redis at this rate costs every phase alike.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

TICK_S = 0.01
# One tick: [time (perf_counter), worker CPU s, shadow pass running, then per engine:
# live base-model requests (B's), the candidate's, background weight, A's stable version's]
PER_ENGINE = 4


class Timeline:
    def __init__(
        self, engines: list[str], stable: str, candidate: str, worker_pid: int | None
    ) -> None:
        self.engines = engines
        self.stable = stable
        self.candidate = candidate
        self.worker_pid = worker_pid
        self.ticks: list[list[float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Timeline:
        self.ticks = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _cpu(self) -> float:
        if self.worker_pid is None:
            return 0.0
        try:
            with open(f"/proc/{self.worker_pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in ticks
        except (OSError, IndexError, ValueError):
            return 0.0

    def _run(self) -> None:
        from workers import shared_state
        from workers.redis_contract.keys import RELEASE_SHADOW_LOCK, inflight_key, load_key

        client = shared_state.client()
        while not self._stop.wait(TICK_S):
            pipe = client.pipeline(transaction=False)
            for name in self.engines:
                pipe.hmget(inflight_key(name), [self.stable, self.candidate])
                pipe.hmget(load_key(name), ["live", "background"])
            pipe.exists(RELEASE_SHADOW_LOCK)
            try:
                raw = pipe.execute()
            except Exception:  # noqa: BLE001 - a tick missed
                continue
            tick = [time.perf_counter(), self._cpu(), float(bool(raw[-1]))]
            for i in range(len(self.engines)):
                (stable, cand), (live, bg) = raw[2 * i], raw[2 * i + 1]
                base = float(live or 0) - float(stable or 0)
                tick += [base, float(cand or 0), float(bg or 0), float(stable or 0)]
            self.ticks.append(tick)


@dataclass
class Slow:
    """What one of B's slow requests waited beside."""

    engine: str  # where it ran ('?' not seen: shorter than a tick; 'both': two of B's at once)
    background_there: bool  # shadow work (candidate ask or judge call) on its engine meanwhile
    judge_there: bool  # a judge call (base model, background) on its engine meanwhile
    background_elsewhere: bool  # shadow work on the other engine only
    pass_running: bool  # a shadow pass was under way
    worker_cores: float  # the worker's CPU during the wait, in cores


def _engine_state(tick: list[float], i: int) -> tuple[float, float, float]:
    base, cand, bg, _ = tick[3 + PER_ENGINE * i : 3 + PER_ENGINE * (i + 1)]
    judge = max(0.0, bg - cand)  # background weight that is not the candidate's: the judge's
    return base, judge, bg


def attribute(ticks: list[list[float]], engines: list[str], sent: float, ttft_ms: float) -> Slow:
    """One request sent at `sent` (perf_counter) that waited `ttft_ms` for its first token."""
    end = sent + ttft_ms / 1000
    window = [t for t in ticks if sent <= t[0] <= end + TICK_S]
    seen = [i for i in range(len(engines)) if any(_engine_state(t, i)[0] > 0 for t in window)]
    engine = engines[seen[0]] if len(seen) == 1 else ("both" if seen else "?")
    bg = [any(_engine_state(t, i)[2] > 0 for t in window) for i in range(len(engines))]
    judge = [any(_engine_state(t, i)[1] > 0 for t in window) for i in range(len(engines))]
    there = seen if seen else []
    cores = 0.0
    if len(window) >= 2 and window[-1][0] > window[0][0]:
        cores = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
    return Slow(
        engine=engine,
        background_there=any(bg[i] for i in there),
        judge_there=any(judge[i] for i in there),
        background_elsewhere=any(bg) and not any(bg[i] for i in there),
        pass_running=any(t[2] for t in window),
        worker_cores=cores,
    )


def engine_shares(
    ticks: list[list[float]], engines: list[str], sent: list[float], ttfts: list[float]
) -> dict[str, Any]:
    """Of a phase: B's requests per engine, the share of ticks with background work per engine
    and with A's live requests in flight per engine, and the worker's mean CPU (cores)."""
    where: dict[str, int] = {}
    for s, t in zip(sent, ttfts, strict=True):
        e = attribute(ticks, engines, s, t).engine
        where[e] = where.get(e, 0) + 1
    busy = {
        name: round(sum(_engine_state(t, i)[2] > 0 for t in ticks) / max(1, len(ticks)), 3)
        for i, name in enumerate(engines)
    }
    a_live = {
        name: round(sum(t[3 + PER_ENGINE * i + 3] > 0 for t in ticks) / max(1, len(ticks)), 3)
        for i, name in enumerate(engines)
    }
    cores = 0.0
    if len(ticks) >= 2 and ticks[-1][0] > ticks[0][0]:
        cores = (ticks[-1][1] - ticks[0][1]) / (ticks[-1][0] - ticks[0][0])
    return {
        "b_on": where,
        "background_share": busy,
        "a_live_share": a_live,
        "worker_cores": round(cores, 3),
    }

"""Published replacement policies as controllers: they pick the engine-cache victim by their score
and evict it just before vLLM would need room (the plugin's real evict); GPU slots stay vLLM's LRU.
"""

from __future__ import annotations

from bench.cachesim.engine import EngineModel
from bench.cachesim.policies.base import Controller, SimContext
from bench.cachesim.trace import TraceRequest
from workers.cache_policy import Action, Evict


class ScoredEviction(Controller):
    def victim_value(
        self, engine: EngineModel, candidates: list[str], now: float
    ) -> dict[str, float]:
        raise NotImplementedError

    def chosen(self, victim: str) -> None:
        """The victim is about to be evicted."""

    def on_miss(self, engine: EngineModel, req: TraceRequest, now: float) -> list[Action]:
        v = req.adapter
        if v in engine.cpu or len(engine.cpu) < engine.cpu_slots:
            return []
        candidates = [
            x for x in engine.cpu if x != v and x not in engine.pinned and not engine.busy(x)
        ]
        if not candidates:
            return []
        value = self.victim_value(engine, candidates, now)
        # Ties go to the least recently used (candidates are in LRU order, min keeps the first).
        victim = min(candidates, key=value.__getitem__)
        self.chosen(victim)
        return [Evict(victim, self.name)]


class LFU(ScoredEviction):
    """Perfect LFU: request counts kept for every version ever seen, ties to the LRU."""

    name = "lfu"

    def __init__(self) -> None:
        self.count: dict[str, int] = {}

    def observe(self, engine: EngineModel, req: TraceRequest, now: float) -> None:
        self.count[req.adapter] = self.count.get(req.adapter, 0) + 1

    def victim_value(
        self, engine: EngineModel, candidates: list[str], now: float
    ) -> dict[str, float]:
        return {x: float(self.count.get(x, 0)) for x in candidates}


class GDSF(ScoredEviction):
    """Greedy-Dual-Size-Frequency (Cherkasova 1998): H = L + frequency * cost / size, where the
    frequency counts hits since the version entered the cache and L inflates to each victim's H."""

    name = "gdsf"

    def __init__(self) -> None:
        self.inflation = 0.0
        self.freq: dict[str, int] = {}
        self.h: dict[str, float] = {}

    def observe(self, engine: EngineModel, req: TraceRequest, now: float) -> None:
        v = req.adapter
        self.freq[v] = self.freq.get(v, 0) + 1 if v in engine.cpu else 1
        info = self.ctx.catalog[v]
        self.h[v] = self.inflation + self.freq[v] * info.load_cost_s / info.size_bytes

    def victim_value(
        self, engine: EngineModel, candidates: list[str], now: float
    ) -> dict[str, float]:
        return {x: self.h.get(x, self.inflation) for x in candidates}

    def chosen(self, victim: str) -> None:
        self.inflation = self.h.get(victim, self.inflation)
        self.freq.pop(victim, None)


class Chameleon(ScoredEviction):
    """Chameleon (Iliakopoulou et al., MICRO 2025) cache score, as we read its paper:
    F * frequency + R * recency + S * size, each normalised over the candidates, lowest evicted
    first; size counts for keeping (a large adapter costs more to load again)."""

    name = "chameleon"

    def __init__(self, f: float = 0.45, r: float = 0.10, s: float = 0.45) -> None:
        self.f, self.r, self.s = f, r, s
        self.count: dict[str, int] = {}

    def observe(self, engine: EngineModel, req: TraceRequest, now: float) -> None:
        self.count[req.adapter] = self.count.get(req.adapter, 0) + 1

    def victim_value(
        self, engine: EngineModel, candidates: list[str], now: float
    ) -> dict[str, float]:
        freq = {x: self.count.get(x, 0) for x in candidates}
        last = {x: engine.last_used.get(x, 0.0) for x in candidates}
        size = {x: self.ctx.catalog[x].size_bytes for x in candidates}
        f_max = max(freq.values()) or 1
        t_min, t_max = min(last.values()), max(last.values())
        span = (t_max - t_min) or 1.0
        s_max = max(size.values()) or 1
        return {
            x: self.f * freq[x] / f_max
            + self.r * (last[x] - t_min) / span
            + self.s * size[x] / s_max
            for x in candidates
        }


class A0(ScoredEviction):
    """A0 (Aho, Denning & Ullman 1971), given the trace's true popularity: keeps the versions most
    requested over the whole trace. It is the best online policy when requests are independent
    draws from a fixed popularity, so on such traces it shows how close any online policy can get
    to belady. An oracle reference (it reads the future's counts), not a deployable policy."""

    name = "a0"

    def attach(self, ctx: SimContext) -> None:
        super().attach(ctx)
        self.count: dict[str, int] = {}
        for r in ctx.trace:
            self.count[r.adapter] = self.count.get(r.adapter, 0) + 1

    def victim_value(
        self, engine: EngineModel, candidates: list[str], now: float
    ) -> dict[str, float]:
        return {x: float(self.count.get(x, 0)) for x in candidates}

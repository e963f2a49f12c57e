"""The offline optimum: Belady's MIN at both tiers, with the whole trace known in advance.

It picks every victim itself (an oracle hook on the engine model, not a control any controller
has): the cached version, or the active one, whose next request comes last. In sequential mode MIN
needs the fewest cold loads for the engine cache and, separately, the fewest GPU loads for the GPU
slots; MIN is a stack algorithm, so the GPU slots' MIN contents always lie inside the cache's, and
one run reaches both minima at once. It is optimal for those counts, not for bytes loaded (that is
weighted caching) nor for TTFT, and it ignores the hard rules.
"""

from __future__ import annotations

import math
from collections import deque

from bench.cachesim.engine import EngineModel
from bench.cachesim.policies.base import Controller, SimContext
from bench.cachesim.trace import TraceRequest


class Belady(Controller):
    name = "belady"

    def attach(self, ctx: SimContext) -> None:
        super().attach(ctx)
        # Requests not yet admitted, per version, in trace order: their first is the next use.
        self.pending: dict[str, deque[int]] = {}
        for i, r in enumerate(ctx.trace):
            self.pending.setdefault(r.adapter, deque()).append(i)
        for engine in ctx.engines:
            engine.cpu_chooser = self.farthest
            engine.gpu_chooser = self.farthest

    def next_use(self, version: str) -> float:
        q = self.pending.get(version)
        return float(q[0]) if q else math.inf

    def farthest(self, candidates: list[str]) -> str:
        # Ties (never used again) break by name: one fixed order keeps MIN a stack algorithm.
        return max(candidates, key=lambda v: (self.next_use(v), v))

    def admitted(self, engine: EngineModel, req: TraceRequest, index: int) -> None:
        q = self.pending[req.adapter]
        if q and q[0] == index:
            q.popleft()
        else:
            q.remove(index)

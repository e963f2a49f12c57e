"""References that bound what a policy can do, for the round-2 goals (issue 12).

- `PinOracle`: the best pin set given the true popularity, under the hard rules: the versions most
  requested over the whole trace, as many as `max_pins` allows (one GPU slot and one cache slot
  stay unpinned) and each tenant's pin quota; cache victims as `a0`. It reads the future's
  counts, so it is a reference for the GPU tier, not a policy.
- `online_miss_bound`: for requests drawn independently from a fixed popularity p, whatever an
  online policy holds in C cache slots, the next request hits with probability at most the sum
  of the C largest p (it is independent of everything the policy has seen). So every online
  policy's expected cold loads are at least n * (1 - top_C(p)); a0 reads the trace's realised
  counts, which carry information about the future, and can beat that.
- `popularity`: the true p of a TraceSpec (Zipf, S-LoRA power, uniform), in the generator's
  adapter order.
"""

from __future__ import annotations

import math

import numpy as np

from bench.cachesim.engine import EngineModel
from bench.cachesim.policies.base import SimContext
from bench.cachesim.policies.classic import A0
from bench.cachesim.trace import TraceRequest, TraceSpec
from workers.cache_policy import Action, Evict, HardRules, Pin


class PinOracle(A0):
    name = "pin-oracle"

    def attach(self, ctx: SimContext) -> None:
        super().attach(ctx)
        self.pins: list[str] = []

    def _pin_set(self, engine: EngineModel, rules: HardRules) -> list[str]:
        if self.pins:
            return self.pins
        room = max(
            0,
            min(
                engine.gpu_slots - rules.min_unpinned_gpu, engine.cpu_slots - rules.min_unpinned_cpu
            ),
        )
        per_tenant: dict[str, int] = {}
        for v in sorted(self.count, key=lambda x: (-self.count[x], x)):
            if len(self.pins) >= room:
                break
            tenant = self.ctx.catalog[v].tenant
            if per_tenant.get(tenant, 0) >= self.ctx.tenant_pin_quota.get(tenant, 0):
                continue
            per_tenant[tenant] = per_tenant.get(tenant, 0) + 1
            self.pins.append(v)
        return self.pins

    def on_miss(self, engine: EngineModel, req: TraceRequest, now: float) -> list[Action]:
        pins = set(self._pin_set(engine, self.ctx.rules))
        out: list[Action] = []
        if req.adapter not in engine.cpu and len(engine.cpu) >= engine.cpu_slots:
            # a0's victim, never one of the pins
            candidates = [
                x
                for x in engine.cpu
                if x != req.adapter
                and x not in engine.pinned
                and x not in pins
                and not engine.busy(x)
            ]
            if candidates:
                out.append(Evict(min(candidates, key=lambda x: self.count.get(x, 0)), self.name))
        # Pins go in as soon as their versions are cached (their first request loads them).
        out += [
            Pin(v, self.name) for v in sorted(pins) if v in engine.cpu and v not in engine.pinned
        ]
        return out


def popularity(spec: TraceSpec) -> np.ndarray:
    """True request probability of each popularity rank (rank 0 most popular)."""
    k = spec.adapters
    if spec.popularity == "uniform":
        return np.full(k, 1.0 / k)
    if spec.popularity == "power":
        # adapter = min(floor(k * U^(1/alpha)), k - 1) with U uniform: P(rank j) by the CDF
        edges = (np.arange(k + 1) / k) ** spec.power_alpha
        p = np.diff(edges)
        return np.sort(p)[::-1]
    w = 1.0 / np.arange(1, k + 1) ** spec.zipf_s
    return w / w.sum()


def online_miss_bound(spec: TraceSpec, cache_slots: int) -> tuple[float, float]:
    """(expected cold loads at least, one standard deviation) for any online policy."""
    p = np.sort(popularity(spec))[::-1]
    miss = 1.0 - float(p[:cache_slots].sum())
    n = spec.requests
    return n * miss, math.sqrt(n * miss * (1.0 - miss))

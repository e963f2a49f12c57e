"""References that bound what a policy can do, for the second goal set (`make bench-cache2`).

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


def cold_percentile_floor(
    at_least_ms: list[int], miss: float, requests: int, p: float = 99.0
) -> tuple[int, float, float]:
    """A floor under the nearest-rank p-th percentile of TTFT, whatever the policy and the
    engine choice.

    `at_least_ms[x]` is how many requests would take at least x ms if they waited for a load
    (load from the node disk, copy into a GPU slot, their own prefill: no fetch, no queueing);
    `miss` is the share of requests that must wait for one whatever is cached where (the online
    bound over the fleet's cache slots: a request whose version is in no engine's cache is cold
    on every engine). Each request's version is an independent draw, so it is cold with
    probability at least `miss` whatever its prompt: the expected number of cold requests at or
    above x ms is at least miss x at_least_ms[x]. The percentile is at least x once
    requests - ceil(p requests) + 1 of them lie there. Returns (x, the expected count there, its
    standard deviation) for the largest such x.
    """
    need = requests - max(1, math.ceil(p / 100.0 * requests)) + 1
    for x in range(len(at_least_ms) - 1, -1, -1):
        if miss * at_least_ms[x] >= need:
            n = at_least_ms[x]
            return x, miss * n, math.sqrt(n * miss * (1.0 - miss))
    return 0, 0.0, 0.0


def cold_percentile_chance(
    at_least_ms: list[int], miss: float, requests: int, target_ms: float, p: float = 99.0
) -> float:
    """The chance (normal approximation) that a run's p-th percentile still comes out below
    `target_ms`: fewer cold requests at or above it than the percentile's rank needs."""
    need = requests - max(1, math.ceil(p / 100.0 * requests)) + 1
    x = min(len(at_least_ms) - 1, max(0, math.ceil(target_ms)))
    n = at_least_ms[x]
    mean, sd = miss * n, math.sqrt(max(1e-9, n * miss * (1.0 - miss)))
    return 0.5 * math.erfc((mean - (need - 0.5)) / sd / math.sqrt(2))

"""Discrete-event simulation of vLLM engines serving a trace while a controller acts on them.

Time model (all knobs in CostModel): a version not on the node's disk is fetched from the object
store first (the request waits; the engine does not). Reading from disk into the engine cache and
copying into a GPU slot happen inside an engine step, so they stall every running request, as in
vLLM. A request starts its prefill after its step's transfers; TTFT is arrival to end of prefill;
it then holds its adapter for output_tokens decode steps. `sequential` runs one request at a time,
each sent when the previous one finished, so counts can be checked by hand.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.cachesim.engine import EngineModel, Transfer
from bench.cachesim.metrics import Metrics
from bench.cachesim.policies import Controller, SimContext
from bench.cachesim.routers import Router, make_router
from bench.cachesim.trace import TraceRequest
from workers.cache_policy import (
    Action,
    EngineChoice,
    Evict,
    HardRules,
    Load,
    Pin,
    SloClass,
    Unpin,
    VersionInfo,
    Warm,
    choose_engine,
)


@dataclass(frozen=True)
class CostModel:
    disk_bytes_per_s: float = 2e9  # node disk -> engine cache (read and build the LoRA tensors)
    object_bytes_per_s: float = 5e8  # object store -> node disk
    pcie_bytes_per_s: float = 1.6e10  # engine cache (host memory) -> GPU slot
    load_overhead_s: float = 0.05  # per cold load: open files, parse, validate
    prefill_tokens_per_s: float = 10_000.0
    decode_step_s: float = 0.03
    max_num_seqs: int = 32
    prestaged: bool = False  # every version already on every node's disk

    def cold_s(self, size: int) -> float:
        return self.load_overhead_s + size / self.disk_bytes_per_s

    def move_s(self, size: int) -> float:
        return size / self.pcie_bytes_per_s

    def fetch_s(self, size: int) -> float:
        return size / self.object_bytes_per_s


@dataclass(frozen=True)
class SimConfig:
    gpu_slots: int
    cpu_slots: int
    engines: int = 1
    sequential: bool = False
    cost: CostModel = field(default_factory=CostModel)
    max_lora_rank: int = 128
    pin_quota: int | None = None  # pins per tenant per engine; None: as many as GPU slots
    pinned_rank_budget: int | None = None
    gold_min_residency_s: float = 300.0
    # With several engines, who picks the engine: the gateway's choose_engine ("portal") or a
    # baseline from bench.cachesim.routers ("round-robin", "residency-first").
    router: str = "portal"


@dataclass
class _Engine:
    model: EngineModel
    waiting: list[int] = field(default_factory=list)  # request indices, in arrival order
    staging: dict[str, list[int]] = field(default_factory=dict)
    staged: set[str] = field(default_factory=set)
    fetching: set[str] = field(default_factory=set)
    pending_loads: set[str] = field(default_factory=set)
    finishes: list[tuple[float, int, int]] = field(default_factory=list)
    running: int = 0
    free_at: float = 0.0
    stall_total: float = 0.0  # running requests' finish times shift by every stall
    wake_at: float | None = None


_SLO_CLASSES: tuple[SloClass, ...] = ("gold", "silver", "bronze")


def slo_class(name: str) -> SloClass:
    """A trace's SLO class as the policy's type; a trace line with another one is refused."""
    for slo in _SLO_CLASSES:
        if slo == name:
            return slo
    raise ValueError(f"unknown SLO class {name!r} in the trace (want one of {_SLO_CLASSES})")


def catalog_of(trace: Sequence[TraceRequest], cost: CostModel) -> dict[str, VersionInfo]:
    out: dict[str, VersionInfo] = {}
    for r in trace:
        if r.adapter not in out:
            out[r.adapter] = VersionInfo(
                r.adapter,
                r.tenant,
                slo_class(r.slo),
                r.rank,
                r.size_bytes,
                cost.cold_s(r.size_bytes),
            )
    return out


class Simulation:
    def __init__(self, trace: Sequence[TraceRequest], policy: Controller, config: SimConfig):
        self.trace = trace
        self.policy = policy
        self.cfg = config
        self.cost = config.cost
        self.engines = [
            _Engine(EngineModel(f"engine{i}", config.gpu_slots, config.cpu_slots))
            for i in range(config.engines)
        ]
        self.catalog = catalog_of(trace, config.cost)
        quota = config.gpu_slots if config.pin_quota is None else config.pin_quota
        policy.attach(
            SimContext(
                trace=trace,
                catalog=self.catalog,
                engines=[e.model for e in self.engines],
                max_lora_rank=config.max_lora_rank,
                tenant_pin_quota={v.tenant: quota for v in self.catalog.values()},
                pinned_rank_budget=config.pinned_rank_budget,
                rules=HardRules(gold_min_residency_s=config.gold_min_residency_s),
            )
        )
        self.metrics = Metrics(outcomes=["?"] * len(trace))
        self.router: Router = make_router(config.router)
        self.served: list[set[str]] = [set() for _ in self.engines]  # distinct adapters each
        self.arrival = [0.0] * len(trace)
        # Out of the engine's cache when it arrived: the request waits for a load, whoever asks
        # for it (the engine, or a policy's Load in its miss handler, which must not turn a
        # cold request into a hit).
        self.cold_on_arrival = [False] * len(trace)
        self.events: list[tuple[float, int, int, str, str]] = []  # time, order, seq, kind, arg
        self.seq = itertools.count()
        self.next_i = 0
        self.outstanding = 0
        self.last_finish = 0.0

    # -- event plumbing ---------------------------------------------------------------------
    def _push(self, t: float, kind: str, arg: str = "", order: int = 1) -> None:
        heapq.heappush(self.events, (t, order, next(self.seq), kind, arg))

    def _wake(self, e: _Engine, t: float) -> None:
        if e.wake_at is None or e.wake_at > t:
            e.wake_at = t
            self._push(t, "wake", e.model.name)

    def _engine(self, name: str) -> _Engine:
        return self.engines[int(name.removeprefix("engine"))]

    def _stall(self, e: _Engine, now: float, seconds: float) -> None:
        if seconds <= 0:
            return
        e.free_at = max(now, e.free_at) + seconds
        e.stall_total += seconds

    def _account(self, e: _Engine, v: str, t: Transfer) -> float:
        """Count a transfer, whoever caused it; return how long it stalls the engine."""
        info = self.catalog[v]
        if t.evicted is not None:
            self.metrics.eviction(self.catalog[t.evicted].slo)
        if t.demoted is not None:
            self.metrics.demotions += 1
        self.metrics.transfer(info.slo, t.cold, t.moved, info.size_bytes)
        cold = self.cost.cold_s(info.size_bytes) if t.cold else 0.0
        return cold + (self.cost.move_s(info.size_bytes) if t.moved else 0.0)

    # -- controller actions -------------------------------------------------------------------
    def _apply(self, e: _Engine, actions: list[Action], now: float) -> None:
        m, model = self.metrics, e.model
        for a in actions:
            v = a.version
            if isinstance(a, Evict):
                if v not in model.cpu:
                    m.refuse("evict-not-resident")
                elif model.busy(v):
                    m.refuse("evict-in-flight")
                else:
                    model.remove(v)
                    m.eviction(self.catalog[v].slo)
            elif isinstance(a, Unpin):
                if v in model.pinned:
                    model.pinned.discard(v)
                    m.unpins += 1
                else:
                    m.refuse("unpin-not-pinned")
            elif isinstance(a, Pin):
                if v not in model.cpu or v in model.pinned:
                    m.refuse("pin-not-cached-or-pinned")
                elif not model.pin_room():
                    m.refuse("pin-leaves-no-unpinned-slot")
                elif not model.can_activate(v):
                    m.refuse("pin-no-gpu-slot")
                else:
                    self._stall(e, now, self._account(e, v, model.activate(v, now)))
                    model.pinned.add(v)
                    m.pins += 1
            elif isinstance(a, Warm):
                if v not in model.cpu:
                    m.refuse("warm-not-cached")
                elif not model.can_activate(v):
                    m.refuse("warm-no-gpu-slot")
                else:
                    self._stall(e, now, self._account(e, v, model.activate(v, now)))
                    m.warms += 1
            elif isinstance(a, Load):
                if v in model.cpu:
                    m.refuse("load-already-cached")
                elif self.cost.prestaged or v in e.staged:
                    self._load(e, v, now)
                else:
                    e.pending_loads.add(v)
                    self._fetch(e, v, now)

    def _load(self, e: _Engine, v: str, now: float) -> None:
        if v in e.model.cpu:
            return
        if not e.model.can_activate(v):
            self.metrics.refuse("load-no-room")
            return
        self._stall(e, now, self._account(e, v, e.model.activate(v, now)))
        self.metrics.controller_loads += 1

    def _fetch(self, e: _Engine, v: str, now: float) -> None:
        if v in e.fetching:
            return
        e.fetching.add(v)
        size = self.catalog[v].size_bytes
        self.metrics.object_fetches += 1
        self.metrics.object_bytes += size
        self._push(now + self.cost.fetch_s(size), "fetched", f"{e.model.name}/{v}")

    # -- request path ---------------------------------------------------------------------------
    def _route(self, v: str) -> _Engine:
        if len(self.engines) == 1:
            return self.engines[0]
        if self.router.name != "portal":
            views = [
                (e.model, e.running + len(e.waiting), self.cost.max_num_seqs) for e in self.engines
            ]
            return self.engines[self.router.choose(v, views)]
        choices = [
            EngineChoice(
                engine=e.model.name,
                where=e.model.where(v),  # type: ignore[arg-type]
                free_cpu_slots=e.model.cpu_slots - len(e.model.cpu),
                in_flight=e.running + len(e.waiting),
                capacity=self.cost.max_num_seqs,
            )
            for e in self.engines
        ]
        return self._engine(choose_engine(choices))

    def _arrive(self, i: int, now: float) -> None:
        r = self.trace[i]
        self.arrival[i] = now
        self.outstanding += 1
        e = self._route(r.adapter)
        self.served[self.engines.index(e)].add(r.adapter)
        self.policy.observe(e.model, r, now)
        self.cold_on_arrival[i] = r.adapter not in e.model.cpu
        if r.adapter not in e.model.gpu:
            self._apply(e, self.policy.on_miss(e.model, r, now), now)
        e.model.queued[r.adapter] = e.model.queued.get(r.adapter, 0) + 1
        if self.cost.prestaged or r.adapter in e.staged:
            bisect.insort(e.waiting, i)
        else:
            e.staging.setdefault(r.adapter, []).append(i)
            self._fetch(e, r.adapter, now)
        self._schedule(e, now)

    def _fetched(self, arg: str, now: float) -> None:
        name, _, v = arg.partition("/")
        e = self._engine(name)
        e.fetching.discard(v)
        e.staged.add(v)
        for i in e.staging.pop(v, []):
            bisect.insort(e.waiting, i)
        if v in e.pending_loads:
            e.pending_loads.discard(v)
            self._load(e, v, now)
        self._schedule(e, now)

    def _schedule(self, e: _Engine, now: float) -> None:
        """One engine step's admissions: FCFS, skipping requests whose adapter cannot get a slot."""
        if now < e.free_at:
            self._wake(e, e.free_at)
            return
        model, cost = e.model, self.cost
        blocked: set[str] = set()
        admitted: list[tuple[int, str]] = []
        keep: list[int] = []
        stall = 0.0
        for i in e.waiting:
            v = self.trace[i].adapter
            if e.running >= cost.max_num_seqs or v in blocked or not model.can_activate(v):
                blocked.add(v)
                keep.append(i)
                continue
            where = model.where(v)
            stall += self._account(e, v, model.activate(v, now))
            model.start(v)
            model.queued[v] -= 1
            if not model.queued[v]:
                del model.queued[v]
            e.running += 1
            self.policy.admitted(model, self.trace[i], i)
            admitted.append((i, "cold" if where == "none" or self.cold_on_arrival[i] else where))
        e.waiting = keep
        self._stall(e, now, stall)
        start = now + stall
        for i, outcome in admitted:
            r = self.trace[i]
            prefill = r.prompt_tokens / cost.prefill_tokens_per_s
            self.metrics.request(i, r.slo, outcome, start + prefill - self.arrival[i])
            finish = start + prefill + r.output_tokens * cost.decode_step_s
            heapq.heappush(e.finishes, (finish - e.stall_total, next(self.seq), i))

    def _finish(self, e: _Engine, now: float) -> None:
        _, _, i = heapq.heappop(e.finishes)
        e.model.finish(self.trace[i].adapter, now)
        e.running -= 1
        self.outstanding -= 1
        self.last_finish = now
        self.metrics.makespan_s = now
        self._schedule(e, now)

    def _tick(self, now: float) -> None:
        for e in self.engines:
            self._apply(e, self.policy.on_tick(e.model, now), now)
            self._schedule(e, now)
        if self.next_i < len(self.trace) or self.outstanding:
            assert self.policy.tick_s is not None
            self._push(now + self.policy.tick_s, "tick", order=2)

    # -- main loop ------------------------------------------------------------------------------
    def run(self) -> Metrics:
        if self.policy.tick_s is not None:
            self._push(self.policy.tick_s, "tick", order=2)
        idle_ticks = 0
        while True:
            # (time, order): at equal times finishes go first, then events, then arrivals
            best: tuple[float, int] | None = None
            source: object = None
            for e in self.engines:
                if e.finishes:
                    t = e.finishes[0][0] + e.stall_total
                    if best is None or (t, 0) < best:
                        best, source = (t, 0), e
            if self.events and (best is None or self.events[0][:2] < best):
                best, source = self.events[0][:2], "event"
            if self.next_i < len(self.trace) and not (self.cfg.sequential and self.outstanding):
                t = self.trace[self.next_i].t
                if self.cfg.sequential:
                    t = max(t, self.last_finish)
                if best is None or (t, 3) < best:
                    best, source = (t, 3), "arrival"
            if best is None:
                break
            now = best[0]
            if isinstance(source, _Engine):
                self._finish(source, now)
                idle_ticks = 0
            elif source == "arrival":
                self.next_i += 1
                self._arrive(self.next_i - 1, now)
                idle_ticks = 0
            else:
                _, _, _, kind, arg = heapq.heappop(self.events)
                if kind == "tick":
                    idle_ticks += 1
                    if idle_ticks > 10_000:
                        raise RuntimeError("simulation stuck: requests wait and nothing changes")
                    self._tick(now)
                elif kind == "wake":
                    e = self._engine(arg)
                    e.wake_at = None
                    self._schedule(e, now)
                else:
                    self._fetched(arg, now)
        if self.outstanding:
            raise RuntimeError(f"{self.outstanding} requests never admitted")
        return self.metrics


def simulate(trace: Sequence[TraceRequest], policy: Controller, config: SimConfig) -> Metrics:
    return Simulation(trace, policy, config).run()

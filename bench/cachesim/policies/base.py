"""What a simulated controller sees and may do: the same controls the real cache controller has."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.cachesim.engine import EngineModel
from bench.cachesim.trace import TraceRequest
from workers.cache_policy import Action, HardRules, VersionInfo


@dataclass(frozen=True)
class SimContext:
    """Fixed facts of a run, handed to the policy before the first request."""

    trace: Sequence[TraceRequest]
    catalog: dict[str, VersionInfo]  # every version in the trace
    engines: Sequence[EngineModel]
    max_lora_rank: int = 128
    tenant_pin_quota: dict[str, int] = field(default_factory=dict)
    pinned_rank_budget: int | None = None
    rules: HardRules = field(default_factory=HardRules)


class Controller:
    """No controller at all: vLLM's own LRU decides everything (the `lru` policy)."""

    name = "lru"
    tick_s: float | None = None  # period of on_tick calls; None: never

    def attach(self, ctx: SimContext) -> None:
        self.ctx = ctx

    def observe(self, engine: EngineModel, req: TraceRequest, now: float) -> None:
        """Every request, as the gateway sees it, before it reaches the engine."""

    def on_miss(self, engine: EngineModel, req: TraceRequest, now: float) -> list[Action]:
        """A request whose version holds no GPU slot on its engine is about to be sent there."""
        return []

    def on_tick(self, engine: EngineModel, now: float) -> list[Action]:
        return []

    def admitted(self, engine: EngineModel, req: TraceRequest, index: int) -> None:
        """The engine admitted request `index` (the oracle keeps its view of the future here)."""

"""The cache policy: pure functions from an engine's state and recent demand to typed actions.

No Django and no I/O here: the cache controller (workers) and the cache simulator (bench/cachesim)
call the same code, so what the benchmark measures is what production runs. The controller:

    demand = DemandTracker.from_history(recent_requests)       # [(time, served_name)], or keep one
    snap = EngineSnapshot(engine=..., now=..., gpu_slots=max_loras, cpu_slots=max_cpu_loras,
                          max_lora_rank=..., resident={...}, versions={...},
                          tenant_pin_quota={...}, busy_peak=...)
    actions = plan_actions(snap, demand, incoming=served_name_or_None, params=PolicyParams())
    assert not check_plan(snap, actions, params.rules)       # then carry them out in order

The gateway: choose_engine([EngineChoice(...), ...]) -> engine name.
"""

from workers.cache_policy.actions import Action, Evict, Load, Pin, Unpin, Warm
from workers.cache_policy.demand import DemandParams, DemandTracker
from workers.cache_policy.planner import PolicyParams, plan_actions
from workers.cache_policy.routing import EngineChoice, Tier, choose_engine
from workers.cache_policy.rules import HardRules, RuleViolation, check_plan, evictable, max_pins
from workers.cache_policy.score import ScoreWeights, eviction_score, keep_value
from workers.cache_policy.snapshot import EngineSnapshot, Resident, SloClass, VersionInfo

__all__ = [
    "Action",
    "DemandParams",
    "DemandTracker",
    "EngineChoice",
    "EngineSnapshot",
    "Evict",
    "HardRules",
    "Load",
    "Pin",
    "PolicyParams",
    "Resident",
    "RuleViolation",
    "ScoreWeights",
    "SloClass",
    "Tier",
    "Unpin",
    "VersionInfo",
    "Warm",
    "check_plan",
    "choose_engine",
    "evictable",
    "eviction_score",
    "keep_value",
    "max_pins",
    "plan_actions",
]

"""The hard rules of shared/DESIGN.md ("Fleet and cache") and a checker for a plan of actions.

`check_plan` replays actions on a copy of the snapshot the way vLLM would take them and lists every
rule they break. The planner never emits a breaking plan; the controller runs the checker again
before acting, so a bug in the planner cannot kill an engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from workers.cache_policy.actions import Action, Evict, Load, Pin, Unpin, Warm
from workers.cache_policy.snapshot import EngineSnapshot, Resident


@dataclass(frozen=True)
class HardRules:
    # vLLM raises "All items are pinned" and the engine core dies when it must make room in a
    # cache whose entries are all pinned, so one GPU slot and one CPU-cache slot stay unpinned.
    min_unpinned_gpu: int = 1
    min_unpinned_cpu: int = 1
    gold_min_residency_s: float = 300.0


@dataclass(frozen=True, slots=True)
class RuleViolation:
    code: str
    version: str
    message: str


def max_pins(snapshot: EngineSnapshot, rules: HardRules) -> int:
    return max(
        0,
        min(
            snapshot.gpu_slots - rules.min_unpinned_gpu,
            snapshot.cpu_slots - rules.min_unpinned_cpu,
        ),
    )


def young_gold(snapshot: EngineSnapshot, name: str, rules: HardRules) -> bool:
    info = snapshot.versions[name]
    res = snapshot.resident[name]
    return info.slo == "gold" and snapshot.now - res.loaded_at < rules.gold_min_residency_s


def evictable(snapshot: EngineSnapshot, name: str, rules: HardRules) -> bool:
    """May the controller remove this version from the engine cache now?"""
    res = snapshot.resident.get(name)
    return (
        res is not None
        and not res.pinned
        and res.in_flight == 0
        and not young_gold(snapshot, name, rules)
    )


def gpu_demotion_victim(resident: dict[str, Resident], gpu_slots: int, incoming: str) -> str | None:
    """Whom vLLM's GPU LRU pushes back to the CPU cache to activate `incoming`.

    "" means a slot is free; None means no slot can be had: every other GPU slot is pinned or
    serving requests (in-flight versions are touched every engine step, so vLLM's LRU reaches them
    last).
    """
    on_gpu = [r for r in resident.values() if r.tier == "gpu" and r.name != incoming]
    if len(on_gpu) < gpu_slots:
        return ""
    idle = [r for r in on_gpu if not r.pinned and r.in_flight == 0]
    if not idle:
        return None
    return min(idle, key=lambda r: r.last_used).name


def check_plan(
    snapshot: EngineSnapshot, actions: Iterable[Action], rules: HardRules
) -> list[RuleViolation]:
    state = dict(snapshot.resident)
    out: list[RuleViolation] = []

    def bad(code: str, version: str, message: str) -> None:
        out.append(RuleViolation(code, version, message))

    def activate(name: str) -> bool:
        if state[name].tier == "gpu":
            return True
        victim = gpu_demotion_victim(state, snapshot.gpu_slots, name)
        if victim is None:
            bad("no-gpu-slot", name, "every other GPU slot is pinned or serving requests")
            return False
        if victim:
            state[victim] = replace(state[victim], tier="cpu")
        state[name] = replace(state[name], tier="gpu")
        return True

    for action in actions:
        name = action.version
        info = snapshot.versions.get(name)
        if info is None:
            bad("unknown-version", name, "no VersionInfo for this version")
            continue
        res = state.get(name)
        if isinstance(action, Evict):
            if res is None:
                bad("not-resident", name, "evict of a version that is not in the engine cache")
            elif res.in_flight > 0:
                bad("evict-in-flight", name, f"{res.in_flight} requests in flight")
            elif res.pinned:
                bad("evict-pinned", name, "unpin before evicting")
            elif young_gold(replace(snapshot, resident=state), name, rules):
                bad("gold-min-residency", name, "gold version younger than its minimum residency")
            else:
                del state[name]
        elif isinstance(action, Unpin):
            if res is None or not res.pinned:
                bad("not-pinned", name, "unpin of a version that is not pinned")
            else:
                state[name] = replace(res, pinned=False)
        elif info.rank > snapshot.max_lora_rank:
            bad("rank-too-large", name, f"rank {info.rank} > engine max {snapshot.max_lora_rank}")
        elif isinstance(action, Load):
            if res is not None:
                bad("already-resident", name, "load of a version already in the engine cache")
            elif len(state) >= snapshot.cpu_slots:
                bad("implicit-eviction", name, "CPU cache full: vLLM's LRU would pick the victim")
            else:
                state[name] = Resident(name, "cpu", loaded_at=snapshot.now, last_used=snapshot.now)
                activate(name)  # add_lora activates the adapter in a GPU slot, as vLLM does
        elif isinstance(action, Warm):
            if res is None:
                bad("not-resident", name, "warm of a version that is not in the engine cache")
            else:
                activate(name)
        elif isinstance(action, Pin):
            if res is None:
                bad("not-resident", name, "pin of a version that is not in the engine cache")
            elif res.pinned:
                bad("already-pinned", name, "pin of a pinned version")
            elif activate(name):
                state[name] = replace(state[name], pinned=True)
    out.extend(_final_state_violations(replace(snapshot, resident=state), rules))
    return out


def _final_state_violations(after: EngineSnapshot, rules: HardRules) -> list[RuleViolation]:
    out: list[RuleViolation] = []
    pinned = after.pinned()
    if len(pinned) > max_pins(after, rules):
        out.append(
            RuleViolation("too-many-pins", "", f"{len(pinned)} pinned > {max_pins(after, rules)}")
        )
    tenants = {after.versions[n].tenant for n in pinned}
    for tenant in sorted(tenants):
        quota = after.tenant_pin_quota.get(tenant, 0)
        if after.pins_of(tenant) > quota:
            out.append(RuleViolation("pin-quota", tenant, f"{after.pins_of(tenant)} > {quota}"))
    # vLLM batches up to --max-loras distinct adapters whatever is pinned: versions with requests
    # in flight need unpinned slots, and an idle pin must not take one of them.
    needy = sum(1 for r in after.resident.values() if r.in_flight and not r.pinned)
    idle_pins = [n for n, r in after.resident.items() if r.pinned and not r.in_flight]
    if idle_pins and len(pinned) > after.gpu_slots - max(rules.min_unpinned_gpu, needy):
        out.append(
            RuleViolation(
                "pins-starve-requests",
                idle_pins[0],
                "an idle pin holds a slot a version with requests in flight needs",
            )
        )
    budget = after.pinned_rank_budget
    if budget is not None and after.pinned_rank() > budget:
        out.append(RuleViolation("rank-budget", "", f"{after.pinned_rank()} > {budget}"))
    return out

"""One converge pass for one engine, as pure planning: from what the engine holds and what the
portal wants to the ordered actions that get there, every one checked by the hard rules.

No Django and no I/O: workers/controller.py feeds it real snapshots and carries the actions out;
bench/fleet_scale.py times it at fleet scale. The cache policy (workers.cache_policy) decides
whom to evict to make room and which versions to pin on its own; explicit wishes (an operator's
or a schedule's pin, a keep-warm window) are constraints it may not undo.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from workers.cache_policy import (
    Action,
    DemandTracker,
    EngineSnapshot,
    Evict,
    Load,
    Pin,
    PolicyParams,
    Resident,
    Unpin,
    Warm,
    check_plan,
    evictable,
    keep_value,
    plan_actions,
)
from workers.cache_policy.rules import RuleViolation

# What the portal wants of a version on an engine (Residency.desired_state, less `absent`).
WANT_ON_DEMAND = "registered"
WANT_WARM = "resident_gpu"
WANT_PINNED = "pinned"
_WANT_ORDER = {WANT_PINNED: 0, WANT_WARM: 1, WANT_ON_DEMAND: 2}
POLICY_REASON = "cache policy: "  # the reason of every action the cache policy chose itself


@dataclass(frozen=True)
class Skipped:
    action: Action
    code: str
    message: str


@dataclass
class EnginePlan:
    actions: list[Action] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    evicted_by_policy: list[str] = field(default_factory=list)  # their desire drops to absent


def plan_converge(
    snapshot: EngineSnapshot,
    demand: DemandTracker,
    *,
    wanted: Mapping[str, str],
    incoming: str | None = None,
    draining: bool = False,
    auto_pins: bool = True,
    params: PolicyParams | None = None,
    pinned_at: Mapping[str, float] | None = None,
    pin_min_hold_s: float = 0.0,
) -> EnginePlan:
    """Actions that take the engine from `snapshot` towards `wanted` ({served name: desire}).

    Residents not wanted are evicted (unless requests are in flight: then next pass); wanted
    versions missing are loaded, the cache policy choosing whom to evict when the cache is full;
    explicit pins are pinned, keep-warm versions warmed; then the policy's own pins. A draining
    engine only sheds. Each action is kept only if the plan so far still passes `check_plan`.

    Anti-thrash: a pin the policy placed less than `pin_min_hold_s` ago (`pinned_at`: {served
    name: when}, the policy's own pins) is not moved by the policy: its unpin waits, and so do
    the policy's new pins of that pass.
    A version no longer wanted here (disabled, unreleased, its desire dropped) is unpinned and
    evicted whatever its pin's age.
    """
    p = params or PolicyParams()
    builder = _Builder(snapshot, p)
    if draining:
        wanted = {}
        incoming = None
    protected = _protected(snapshot, wanted, p)
    for name, res in sorted(snapshot.resident.items()):
        if name in wanted or name == incoming or res.in_flight:
            continue
        if res.pinned:
            builder.add(Unpin(name, "not wanted on this engine"))
        builder.add(Evict(name, "not wanted on this engine"))
    missing = [n for n in wanted if n not in builder.state]
    missing.sort(key=lambda n: (n != incoming, _WANT_ORDER.get(wanted[n], 3), n))
    if incoming is not None and incoming not in builder.state and incoming not in missing:
        missing.insert(0, incoming)
    for name in missing:
        if name not in snapshot.versions:
            builder.skip(Load(name), "unknown-version", "no VersionInfo for this version")
            continue
        if name == incoming:
            shield = protected  # a request waits: anything beyond the kept set may make room
        else:
            # A wish loads into a free slot or displaces a lesser wish, never an equal one:
            # more wishes than slots must not churn the cache on every pass.
            level = _WANT_ORDER.get(wanted[name], 3)
            shield = protected | {n for n, w in wanted.items() if _WANT_ORDER.get(w, 3) <= level}
        builder.make_room(name, demand, shield)
        builder.add(Load(name, "wanted" if name != incoming else "a request needs it"))
    for name, want in sorted(wanted.items()):
        planned = builder.state.get(name)
        if planned is None:
            continue
        if want == WANT_PINNED and not planned.pinned:
            builder.add(Pin(name, "pinned by request"))
        elif want == WANT_WARM and planned.tier != "gpu":
            builder.add(Warm(name, "kept warm"))
    if auto_pins and not draining:
        builder.policy_pins(
            demand,
            protected={n for n, w in wanted.items() if w == WANT_PINNED},
            held=_held_pins(builder.state, pinned_at or {}, snapshot.now, pin_min_hold_s),
        )
    violations = check_plan(snapshot, builder.plan.actions, p.rules)
    if violations:  # the builder checks every step; this is the last guard before an engine
        raise AssertionError(f"converge plan breaks hard rules: {violations}")
    return builder.plan


def _protected(
    snapshot: EngineSnapshot, wanted: Mapping[str, str], params: PolicyParams
) -> set[str]:
    """Pinned and keep-warm wishes the policy may not evict, at most all cache slots but one:
    whatever was asked, a request for another version can always be given a slot."""
    room = max(0, snapshot.cpu_slots - params.rules.min_unpinned_cpu)
    kept = [n for n, w in wanted.items() if w in (WANT_PINNED, WANT_WARM)]
    kept.sort(
        key=lambda n: (
            not (n in snapshot.resident and snapshot.resident[n].pinned),
            n not in snapshot.resident,
            _WANT_ORDER[wanted[n]],
            n,
        )
    )
    return set(kept[:room])


def _held_pins(
    state: Mapping[str, Resident], pinned_at: Mapping[str, float], now: float, hold_s: float
) -> set[str]:
    """Pins placed less than `hold_s` ago: the policy may not move them yet."""
    return {
        n
        for n, placed in pinned_at.items()
        if n in state and state[n].pinned and now - placed < hold_s
    }


class _Builder:
    def __init__(self, snapshot: EngineSnapshot, params: PolicyParams) -> None:
        self.snap = snapshot
        self.p = params
        self.plan = EnginePlan()
        self.state: dict[str, Resident] = dict(snapshot.resident)

    def _now(self) -> EngineSnapshot:
        return replace(self.snap, resident=self.state)

    def skip(self, action: Action, code: str, message: str) -> None:
        self.plan.skipped.append(Skipped(action, code, message))

    def add(self, action: Action) -> bool:
        """Append `action` if the plan with it still keeps every hard rule; mirror it in state."""
        violations: list[RuleViolation] = check_plan(self._now(), [action], self.p.rules)
        if violations:
            first = violations[0]
            self.skip(action, first.code, first.message)
            return False
        self.plan.actions.append(action)
        self._apply(action)
        return True

    def _apply(self, action: Action) -> None:
        # Replaying through check_plan's own model keeps the two in step.
        name = action.version
        if isinstance(action, Evict):
            self.state.pop(name, None)
            return
        if isinstance(action, Unpin):
            self.state[name] = replace(self.state[name], pinned=False)
            return
        if isinstance(action, Load):
            now = self.snap.now
            self.state[name] = Resident(name, "cpu", loaded_at=now, last_used=now)
        self._activate(name)
        if isinstance(action, Pin):
            self.state[name] = replace(self.state[name], pinned=True)

    def _activate(self, name: str) -> None:
        from workers.cache_policy.rules import gpu_demotion_victim

        if self.state[name].tier == "gpu":
            return
        victim = gpu_demotion_victim(self.state, self.snap.gpu_slots, name)
        if victim:
            self.state[victim] = replace(self.state[victim], tier="cpu")
        if victim is not None:
            self.state[name] = replace(self.state[name], tier="gpu")

    def make_room(self, incoming: str, demand: DemandTracker, shield: set[str]) -> None:
        """Evict the version the cache policy values least, among those the rules allow and
        the shield does not cover, so vLLM's own LRU never picks a victim."""
        if len(self.state) < self.snap.cpu_slots:
            return
        now = self._now()
        candidates = [n for n in self.state if n not in shield and evictable(now, n, self.p.rules)]
        if not candidates:
            return  # the Load below is then refused by the rules (implicit-eviction)
        victim = min(
            candidates,
            key=lambda n: keep_value(
                self.snap.versions[n], self.state[n], demand, self.snap.now, self.p.weights
            ),
        )
        if self.add(Evict(victim, f"{POLICY_REASON}least valuable, room for {incoming}")):
            self.plan.evicted_by_policy.append(victim)

    def policy_pins(
        self, demand: DemandTracker, protected: set[str], held: AbstractSet[str] = frozenset()
    ) -> None:
        actions = [
            a
            for a in plan_actions(self._now(), demand, params=self.p)
            if isinstance(a, Pin | Unpin)
        ]
        # A pin within its minimum hold is not moved: neither given up nor joined by new pins
        # that were to take its place (the policy chose them with the held pin gone).
        moving_held = any(isinstance(a, Unpin) and a.version in held - protected for a in actions)
        for action in actions:
            if isinstance(action, Unpin) and action.version in protected | held:
                if action.version not in protected:
                    self.skip(action, "pin-hold", "pinned less than the minimum hold ago")
                continue
            if isinstance(action, Pin) and moving_held:
                self.skip(action, "pin-hold", "a pin it would replace is within its minimum hold")
                continue
            self.add(type(action)(action.version, f"{POLICY_REASON}{action.reason}"))

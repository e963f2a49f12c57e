"""Engine choice for one request: where its version is hottest, then where it costs least to load.

Order (shared/DESIGN.md, Gateway): GPU-resident, then in the CPU cache, then an engine with a free
CPU-cache slot (a load there evicts nobody), then the least loaded. Within a class the least loaded
wins, so a hot version resident on several engines spreads over them.

Load here counts other tenants' recent work too (`others_rate`, their sequences a second on that
engine lately): each sequence a second of theirs weighs as much as a whole engine's worth of
requests in flight (NEIGHBOUR_RATE). A tenant's traffic therefore keeps to engines the other
tenants are not using while the pool has room, and spreads over all of them when it is alone: an
engine decoding one tenant's long requests slows every other sequence in its batch (on a CPU
engine nearly in proportion; bench/neighbours.py), so tenants kept apart do not slow each other.
An engine whose queue reaches `saturation` times its capacity loses its preference to an open
one only if that one is less loaded, its neighbours' work counted: a tenant whose engine is full
queues there rather than spill onto an engine its neighbours keep busy. Residency still comes
first: no version is loaded elsewhere to avoid a neighbour. With no other tenant (the cache
simulator's single stream) the order is unchanged.

Live and background requests (an eval run's cases) keep apart the same way: an engine running
background sequences weighs as a full engine more for a live request (BACKGROUND_LOAD), so live
traffic keeps to the engines an eval run is not on while one serves it as well; and a background
request packs onto the engine its lane already runs on while it has room there beside the live
headroom (`background_room`), so an eval run fills one engine before it touches the next rather
than spreading over all of them. Residency still comes first for both
(docs/decisions/0012-live-and-background-keep-apart.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Tier(StrEnum):
    """Where a request's version is on an engine: what engine choice prefers, and what the
    gateway records a request as served from."""

    GPU = "gpu"  # resident in the engine's GPU slots (or pinned)
    CPU = "cpu"  # in the engine's CPU cache
    NONE = "none"  # not on the engine: it is loaded before the request is sent
    COLD = "cold"  # was not on the engine, and this request waited for its load
    BASE = "base"  # the base model itself: every engine of it holds it


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """What the router knows of one candidate engine for one version."""

    engine: str
    where: Tier  # where the version is on this engine
    free_cpu_slots: int
    in_flight: int  # requests running or queued on the engine
    capacity: int  # requests it serves at once (vLLM --max-num-seqs)
    others_rate: float = 0.0  # other tenants' sequences a second sent to it lately
    background: int = 0  # background sequences (eval runs') running there, every process's
    background_room: int = 0  # more background sequences of this process it takes there


# Other tenants' sequences a second that make an engine count as full (load 1.0): a neighbour
# sending one short request a second keeps another tenant's heavy traffic off its engine unless
# the other engines are as busy; one that asks once a minute hardly moves the choice.
NEIGHBOUR_RATE = 1.0
# What background sequences on an engine add to its load for a live request: as much as a full
# engine, so that a live request goes where no eval runs whenever such an engine is no fuller.
BACKGROUND_LOAD = 1.0


def busy(c: EngineChoice) -> float:
    """The engine's requests in flight as a fraction of its capacity, plus its other tenants'
    recent rate of work (see NEIGHBOUR_RATE)."""
    return c.in_flight / max(1, c.capacity) + c.others_rate / NEIGHBOUR_RATE


def load(c: EngineChoice) -> float:
    """What a live request weighs an engine by: busy(), and BACKGROUND_LOAD more while
    background sequences run there."""
    return busy(c) + (BACKGROUND_LOAD if c.background > 0 else 0.0)


# Hot, then warm; a version on neither goes where a free CPU-cache slot is (2), else anywhere (3).
# A table, not comparisons: one lookup per candidate on the request path.
_RESIDENT_CLASS: dict[str, int] = {Tier.GPU: 0, Tier.CPU: 1}


def _preference(c: EngineChoice) -> tuple[int, float, str]:
    klass = _RESIDENT_CLASS.get(c.where)
    if klass is None:
        klass = 2 if c.free_cpu_slots > 0 else 3
    return klass, load(c), c.engine


def _packing(c: EngineChoice) -> tuple[int, int, int, float, str]:
    """A background request's preference: residency; then an engine its lane already runs on
    with room left for it, the one running most first; then one without background sequences;
    then one with no room left (the request waits there for it); the least busy within each
    (background sequences are its own lane's, no neighbour's)."""
    klass = _preference(c)[0]
    if c.background_room <= 0:
        return klass, 2, 0, busy(c), c.engine
    if c.background > 0:
        return klass, 0, -c.background, busy(c), c.engine
    return klass, 1, 0, busy(c), c.engine


def choose_engine(
    candidates: Sequence[EngineChoice], *, saturation: float = 2.0, background: bool = False
) -> str:
    """Name of the engine to send the request to.

    An engine whose queue is `saturation` times its capacity loses its preference: waiting behind a
    full batch costs more than a load elsewhere. A `background` request packs (_packing).
    """
    if not candidates:
        raise ValueError("no engine to choose from")
    if background:
        return min(candidates, key=_packing).engine
    open_ = [c for c in candidates if c.in_flight < saturation * max(1, c.capacity)]
    best = min(open_ or candidates, key=_preference)
    if open_ and len(open_) < len(candidates):
        # A saturated engine is passed over only for a less loaded one, its neighbours' work
        # counted: a tenant whose own engine is full queues there rather than spill onto an
        # engine its neighbours keep busy (its long requests would slow every one of theirs).
        home = min((c for c in candidates if c not in open_), key=load)
        if load(home) <= load(best):
            return home.engine
    return best.engine

"""Engine choice for one request: where its version is hottest, then where it costs least to load.

Order (shared/DESIGN.md, Gateway): GPU-resident, then in the CPU cache, then an engine with a free
CPU-cache slot (a load there evicts nobody), then the least loaded. Within a class the least loaded
wins, so a hot version resident on several engines spreads over them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Where = Literal["gpu", "cpu", "none"]


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """What the router knows of one candidate engine for one version."""

    engine: str
    where: Where  # where the version is on this engine
    free_cpu_slots: int
    in_flight: int  # requests running or queued on the engine
    capacity: int  # requests it serves at once (vLLM --max-num-seqs)


def _preference(c: EngineChoice) -> tuple[int, float, str]:
    if c.where == "gpu":
        klass = 0
    elif c.where == "cpu":
        klass = 1
    elif c.free_cpu_slots > 0:
        klass = 2
    else:
        klass = 3
    return klass, c.in_flight / max(1, c.capacity), c.engine


def choose_engine(candidates: Sequence[EngineChoice], *, saturation: float = 2.0) -> str:
    """Name of the engine to send the request to.

    An engine whose queue is `saturation` times its capacity loses its preference: waiting behind a
    full batch costs more than a load elsewhere.
    """
    if not candidates:
        raise ValueError("no engine to choose from")
    open_ = [c for c in candidates if c.in_flight < saturation * max(1, c.capacity)]
    pool = open_ or list(candidates)
    return min(pool, key=_preference).engine

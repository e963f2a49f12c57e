"""The benchmark suite's scenarios: a trace spec and engine shape each, named for the report."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bench.cachesim.trace import TraceSpec

GPU_SLOTS = 8
CPU_SLOTS = 32
BASE = TraceSpec(adapters=2 * CPU_SLOTS, requests=20_000, rate=1.0, zipf_s=1.0, seed=7)


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    spec: TraceSpec
    gpu_slots: int = GPU_SLOTS
    cpu_slots: int = CPU_SLOTS
    pin_quota: int | None = None
    extra: dict[str, float] = field(default_factory=dict)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("skewed-2x", "Zipf 1.0, 64 adapters on 32 cache slots, Poisson", BASE),
    Scenario("flat-2x", "uniform popularity, 64 adapters", replace(BASE, popularity="uniform")),
    Scenario("skewed-8x", "Zipf 1.0, 256 adapters", replace(BASE, adapters=8 * CPU_SLOTS)),
    Scenario(
        "slora-power-8x",
        "S-LoRA power mode alpha 0.3, 256 adapters",
        replace(BASE, adapters=8 * CPU_SLOTS, popularity="power", power_alpha=0.3),
    ),
    Scenario("bursty-2x", "Zipf 1.0, Gamma arrivals cv 4", replace(BASE, arrival="gamma", cv=4.0)),
    Scenario(
        "drift-2x",
        "Zipf 1.0, a quarter of the ranks reshuffled every 10 min, diurnal rate",
        replace(BASE, drift_period_s=600.0, drift_fraction=0.25, arrival="diurnal"),
    ),
    Scenario(
        "mixed-ranks-2x",
        "Zipf 1.0, ranks 8..128 (16 MiB..256 MiB)",
        replace(BASE, ranks=(8, 16, 32, 64, 128)),
    ),
    Scenario(
        "gold-bronze-2x",
        "Zipf 1.0, one gold tenant and three bronze, 2 pins per tenant",
        replace(BASE, tenants=(("gold", 1), ("bronze", 3))),
        pin_quota=2,
    ),
)


def by_name(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(name)

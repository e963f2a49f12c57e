"""Seeded request traces for the cache simulator (JSON lines, one request per line).

    python -m bench.cachesim.trace --adapters 64 --requests 20000 --popularity zipf --zipf-s 1.0 \
        --arrival gamma --cv 4 --ranks 8,16,32,64,128 --tenants gold:1,silver:2,bronze:3 --seed 1 \
        --out var/traces/skewed.jsonl

Knobs follow the papers: Zipf popularity, S-LoRA's power mode (adapter = floor(N * U^(1/alpha))),
Gamma arrivals with a coefficient of variation as burstiness (S-LoRA), a diurnal rate, and
popularity drift (a share of the popularity ranks reshuffled every period).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

Popularity = Literal["zipf", "power", "uniform"]
Arrival = Literal["poisson", "gamma", "diurnal"]
BYTES_PER_RANK = 2 * 1024 * 1024  # q,k,v,o LoRA of a 7B model in fp16: about 2 MiB per unit of rank


@dataclass(frozen=True, slots=True)
class TraceRequest:
    t: float
    adapter: str
    tenant: str
    slo: str
    rank: int
    size_bytes: int
    prompt_tokens: int
    output_tokens: int
    # A later turn of a conversation, as the gateway tells it (gateway/conversations.py).
    follow_up: bool = False


@dataclass(frozen=True)
class TraceSpec:
    adapters: int = 64
    requests: int = 20_000
    rate: float = 4.0  # mean requests per second
    popularity: Popularity = "zipf"
    zipf_s: float = 1.0
    power_alpha: float = 0.3
    ranks: tuple[int, ...] = (16,)
    rank_weights: tuple[float, ...] = ()  # empty: equal weights
    bytes_per_rank: int = BYTES_PER_RANK
    arrival: Arrival = "poisson"
    cv: float = 1.0  # Gamma arrivals: coefficient of variation of the gaps (1 = Poisson)
    diurnal_period_s: float = 3600.0
    diurnal_amplitude: float = 0.8
    drift_period_s: float = 0.0  # 0: no drift
    drift_fraction: float = 0.25
    tenants: tuple[tuple[str, int], ...] = (("gold", 1), ("silver", 2), ("bronze", 3))
    prompt_tokens: tuple[int, int] = (64, 1024)
    output_tokens: tuple[int, int] = (16, 256)
    seed: int = 0


def _arrival_times(spec: TraceSpec, rng: np.random.Generator) -> np.ndarray:
    n = spec.requests
    if spec.arrival == "poisson":
        return np.cumsum(rng.exponential(1.0 / spec.rate, n))
    if spec.arrival == "gamma":
        shape = 1.0 / (spec.cv * spec.cv)
        return np.cumsum(rng.gamma(shape, spec.cv * spec.cv / spec.rate, n))
    # Diurnal: a Poisson process thinned to rate * (1 + A sin(2 pi t / period)).
    peak = spec.rate * (1.0 + spec.diurnal_amplitude)
    times: list[float] = []
    t = 0.0
    while len(times) < n:
        t += float(rng.exponential(1.0 / peak))
        level = 1.0 + spec.diurnal_amplitude * math.sin(2 * math.pi * t / spec.diurnal_period_s)
        if rng.random() * (1.0 + spec.diurnal_amplitude) < level:
            times.append(t)
    return np.array(times)


def _popularity_draws(spec: TraceSpec, rng: np.random.Generator) -> np.ndarray:
    """Popularity rank (0 = most popular) of each request."""
    n, k = spec.requests, spec.adapters
    if spec.popularity == "uniform":
        return rng.integers(0, k, n)
    if spec.popularity == "power":
        return np.minimum((rng.power(spec.power_alpha, n) * k).astype(int), k - 1)
    weights = 1.0 / np.arange(1, k + 1) ** spec.zipf_s
    return rng.choice(k, size=n, p=weights / weights.sum())


def generate(spec: TraceSpec) -> list[TraceRequest]:
    rng = np.random.default_rng(spec.seed)
    tenant_names: list[tuple[str, str]] = []
    for slo, count in spec.tenants:
        tenant_names += [(f"{slo}{i}", slo) for i in range(count)]
    owner = rng.integers(0, len(tenant_names), spec.adapters)
    rank_p = np.array(spec.rank_weights or [1.0] * len(spec.ranks), dtype=float)
    ranks = rng.choice(np.array(spec.ranks), size=spec.adapters, p=rank_p / rank_p.sum())
    names = [f"{tenant_names[owner[i]][0]}--a{i:03d}" for i in range(spec.adapters)]
    by_rank = rng.permutation(spec.adapters)  # popularity rank -> adapter index
    times = _arrival_times(spec, rng)
    draws = _popularity_draws(spec, rng)
    prompts = rng.integers(spec.prompt_tokens[0], spec.prompt_tokens[1] + 1, spec.requests)
    outputs = rng.integers(spec.output_tokens[0], spec.output_tokens[1] + 1, spec.requests)
    out: list[TraceRequest] = []
    epoch = 0
    for i in range(spec.requests):
        t = float(times[i])
        if spec.drift_period_s > 0:
            while t >= (epoch + 1) * spec.drift_period_s:
                epoch += 1
                moved = rng.choice(spec.adapters, int(spec.drift_fraction * spec.adapters), False)
                by_rank[moved] = by_rank[rng.permutation(moved)]
        a = int(by_rank[draws[i]])
        tenant, slo = tenant_names[owner[a]]
        out.append(
            TraceRequest(
                t=round(t, 6),
                adapter=names[a],
                tenant=tenant,
                slo=slo,
                rank=int(ranks[a]),
                size_bytes=int(ranks[a]) * spec.bytes_per_rank,
                prompt_tokens=int(prompts[i]),
                output_tokens=int(outputs[i]),
            )
        )
    return out


def dumps(requests: Iterable[TraceRequest]) -> str:
    return "".join(json.dumps(asdict(r), separators=(",", ":")) + "\n" for r in requests)


def load(path: str | Path) -> list[TraceRequest]:
    with open(path, encoding="utf-8") as f:
        return [TraceRequest(**json.loads(line)) for line in f if line.strip()]


def _pairs(text: str) -> tuple[tuple[str, int], ...]:
    out = []
    for part in text.split(","):
        slo, _, count = part.partition(":")
        if slo not in ("gold", "silver", "bronze") or not count.isdigit():
            raise argparse.ArgumentTypeError(f"bad tenant class {part!r}, want e.g. gold:1")
        out.append((slo, int(count)))
    return tuple(out)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def parse_args(argv: Sequence[str] | None = None) -> tuple[TraceSpec, str | None]:
    d = TraceSpec()
    ap = argparse.ArgumentParser(prog="python -m bench.cachesim.trace", description=__doc__)
    ap.add_argument("--adapters", type=int, default=d.adapters)
    ap.add_argument("--requests", type=int, default=d.requests)
    ap.add_argument("--rate", type=float, default=d.rate, help="mean requests per second")
    ap.add_argument("--popularity", choices=["zipf", "power", "uniform"], default=d.popularity)
    ap.add_argument("--zipf-s", type=float, default=d.zipf_s)
    ap.add_argument("--power-alpha", type=float, default=d.power_alpha)
    ap.add_argument("--ranks", type=_ints, default=d.ranks, help="e.g. 8,16,32,64,128")
    ap.add_argument("--rank-weights", type=_floats, default=d.rank_weights)
    ap.add_argument("--bytes-per-rank", type=int, default=d.bytes_per_rank)
    ap.add_argument("--arrival", choices=["poisson", "gamma", "diurnal"], default=d.arrival)
    ap.add_argument("--cv", type=float, default=d.cv, help="Gamma burstiness (1 = Poisson)")
    ap.add_argument("--diurnal-period", type=float, default=d.diurnal_period_s)
    ap.add_argument("--diurnal-amplitude", type=float, default=d.diurnal_amplitude)
    ap.add_argument("--drift-period", type=float, default=d.drift_period_s, help="0: no drift")
    ap.add_argument("--drift-fraction", type=float, default=d.drift_fraction)
    ap.add_argument("--tenants", type=_pairs, default=d.tenants, help="e.g. gold:1,bronze:3")
    ap.add_argument("--prompt-tokens", type=_ints, default=d.prompt_tokens, help="min,max")
    ap.add_argument("--output-tokens", type=_ints, default=d.output_tokens, help="min,max")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--out", help="file to write (default: stdout)")
    a = ap.parse_args(argv)
    if len(a.prompt_tokens) != 2 or len(a.output_tokens) != 2:
        ap.error("--prompt-tokens and --output-tokens take min,max")
    if a.rank_weights and len(a.rank_weights) != len(a.ranks):
        ap.error("--rank-weights needs one weight per rank")
    spec = TraceSpec(
        adapters=a.adapters,
        requests=a.requests,
        rate=a.rate,
        popularity=a.popularity,
        zipf_s=a.zipf_s,
        power_alpha=a.power_alpha,
        ranks=a.ranks,
        rank_weights=a.rank_weights,
        bytes_per_rank=a.bytes_per_rank,
        arrival=a.arrival,
        cv=a.cv,
        diurnal_period_s=a.diurnal_period,
        diurnal_amplitude=a.diurnal_amplitude,
        drift_period_s=a.drift_period,
        drift_fraction=a.drift_fraction,
        tenants=a.tenants,
        prompt_tokens=(a.prompt_tokens[0], a.prompt_tokens[1]),
        output_tokens=(a.output_tokens[0], a.output_tokens[1]),
        seed=a.seed,
    )
    return spec, a.out


def main(argv: Sequence[str] | None = None) -> int:
    spec, out = parse_args(argv)
    text = dumps(generate(spec))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

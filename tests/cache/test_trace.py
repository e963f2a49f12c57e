"""The trace generator: deterministic per seed, and each knob does what it says."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path

from bench.cachesim.trace import TraceSpec, dumps, generate, load, main

SMALL = TraceSpec(adapters=20, requests=3000, seed=11)


def test_same_seed_same_bytes_other_seed_other_trace() -> None:
    assert dumps(generate(SMALL)) == dumps(generate(SMALL))
    assert dumps(generate(SMALL)) != dumps(generate(replace(SMALL, seed=12)))


def test_the_cli_writes_what_generate_makes(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    assert main(["--adapters", "20", "--requests", "3000", "--seed", "11", "--out", str(out)]) == 0
    assert out.read_text() == dumps(generate(SMALL))
    assert load(out) == generate(SMALL)


def test_every_line_has_the_documented_fields() -> None:
    first = dumps(generate(SMALL)).splitlines()[0]
    for key in ("t", "adapter", "tenant", "slo", "rank", "size_bytes", "prompt_tokens"):
        assert f'"{key}":' in first
    times = [r.t for r in generate(SMALL)]
    assert times == sorted(times)


def _top_share(spec: TraceSpec) -> float:
    counts = Counter(r.adapter for r in generate(spec))
    return counts.most_common(1)[0][1] / spec.requests


def test_zipf_is_skewed_and_uniform_is_flat() -> None:
    assert _top_share(replace(SMALL, zipf_s=1.2)) > 0.2
    assert _top_share(replace(SMALL, popularity="uniform")) < 0.08
    assert _top_share(replace(SMALL, popularity="power", power_alpha=0.2)) > 0.3


def test_gamma_cv_makes_arrivals_bursty() -> None:
    def gap_cv(spec: TraceSpec) -> float:
        t = [r.t for r in generate(spec)]
        gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
        return statistics.pstdev(gaps) / statistics.mean(gaps)

    assert 0.9 < gap_cv(SMALL) < 1.1  # Poisson
    assert gap_cv(replace(SMALL, arrival="gamma", cv=4.0)) > 3.0


def test_ranks_sizes_and_tenants_follow_the_spec() -> None:
    spec = replace(SMALL, ranks=(8, 128), tenants=(("gold", 1), ("bronze", 2)))
    trace = generate(spec)
    assert {r.rank for r in trace} == {8, 128}
    assert all(r.size_bytes == r.rank * spec.bytes_per_rank for r in trace)
    assert {r.slo for r in trace} == {"gold", "bronze"}
    assert all(r.adapter.startswith(r.tenant + "--") for r in trace)


def test_drift_changes_who_is_popular() -> None:
    spec = replace(SMALL, requests=6000, drift_period_s=1000.0, drift_fraction=1.0)
    trace = generate(spec)
    first = Counter(r.adapter for r in trace if r.t < 1000).most_common(1)[0][0]
    late = Counter(r.adapter for r in trace if 4000 <= r.t < 5000).most_common(3)
    assert first not in [a for a, _ in late]

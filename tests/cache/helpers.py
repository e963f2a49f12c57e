"""Tiny traces built by hand for the cache tests."""

from __future__ import annotations

from bench.cachesim.trace import TraceRequest

MIB = 1024 * 1024


def req(
    adapter: str,
    t: float = 0.0,
    *,
    slo: str = "bronze",
    rank: int = 16,
    size: int = 32 * MIB,
    prompt: int = 100,
    output: int = 10,
) -> TraceRequest:
    tenant = adapter.split("--")[0] if "--" in adapter else "t0"
    return TraceRequest(t, adapter, tenant, slo, rank, size, prompt, output)


def trace_of(names: str | list[str], gap: float = 1.0) -> list[TraceRequest]:
    """'ABAC' -> requests for adapters A, B, A, C one `gap` apart."""
    return [req(n, i * gap) for i, n in enumerate(names)]

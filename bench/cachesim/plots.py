"""PNG plots for the cache benchmark section of docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {
    "lru": "#7f7f7f",
    "lfu": "#1f77b4",
    "gdsf": "#17becf",
    "chameleon": "#9467bd",
    "portal": "#d62728",
    "belady": "#2ca02c",
    "a0": "#bcbd22",
}


def _grouped(ax: Any, scenarios: list[str], series: dict[str, list[float]]) -> None:
    width = 0.8 / max(1, len(series))
    for k, (policy, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(scenarios))]
        ax.bar(xs, values, width, label=policy, color=COLORS.get(policy))
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels(scenarios, rotation=25, ha="right", fontsize=8)
    ax.legend(fontsize=7, ncol=4)
    ax.grid(axis="y", alpha=0.3)


def ratio_to_belady(results: dict[str, Any], key: str, policies: list[str], path: Path) -> None:
    seq = results["sequential"]
    scenarios = list(seq)
    series = {
        p: [seq[s][p][key] / max(1, seq[s]["belady"][key]) for s in scenarios] for p in policies
    }
    fig, ax = plt.subplots(figsize=(9, 3.6))
    _grouped(ax, scenarios, series)
    ax.axhline(1.10, color="black", linestyle="--", linewidth=0.8)
    ax.axhline(1.25, color="black", linestyle=":", linewidth=0.8)
    what = "cold loads" if key == "cold_loads" else "GPU loads (GPU misses)"
    ax.set_ylabel(f"{what} / belady's")
    ax.set_title(f"Sequential mode: {what} relative to the offline optimum (goal <= 1.10)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def p99_vs_lru(results: dict[str, Any], policies: list[str], path: Path) -> None:
    conc = results["concurrent"]
    scenarios = list(conc)
    series = {
        p: [conc[s][p]["ttft_p99_ms"] / max(1e-9, conc[s]["lru"]["ttft_p99_ms"]) for s in scenarios]
        for p in policies
    }
    fig, ax = plt.subplots(figsize=(9, 3.6))
    _grouped(ax, scenarios, series)
    ax.axhline(0.70, color="black", linestyle="--", linewidth=0.8)
    ax.set_ylabel("p99 TTFT / lru's")
    ax.set_title("Under load: p99 TTFT relative to vLLM's own LRU (goal for skewed-2x <= 0.70)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ttft_ccdf(ttfts: dict[str, list[float]], title: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for policy, values in ttfts.items():
        xs = sorted(values)
        n = len(xs)
        ax.step(
            [x * 1000 for x in xs],
            [1 - i / n for i in range(n)],
            where="post",
            label=policy,
            color=COLORS.get(policy),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 1)
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("share of requests slower")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

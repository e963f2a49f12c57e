"""Run one policy on one trace.

    python -m bench.cachesim --trace FILE --policy NAME --gpu-slots N --cpu-slots M \\
        [--sequential] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from bench.cachesim.policies import POLICIES, make_policy
from bench.cachesim.sim import CostModel, SimConfig, simulate
from bench.cachesim.trace import load


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    c = CostModel()
    ap = argparse.ArgumentParser(prog="python -m bench.cachesim", description=__doc__)
    ap.add_argument("--trace", required=True, help="JSON lines from python -m bench.cachesim.trace")
    ap.add_argument("--policy", required=True, choices=sorted(POLICIES))
    ap.add_argument("--gpu-slots", type=int, required=True, help="vLLM --max-loras")
    ap.add_argument("--cpu-slots", type=int, required=True, help="vLLM --max-cpu-loras")
    ap.add_argument("--engines", type=int, default=1)
    ap.add_argument("--sequential", action="store_true", help="one request at a time")
    ap.add_argument("--json", action="store_true", help="print the metrics as JSON")
    ap.add_argument("--disk-gbps", type=float, default=c.disk_bytes_per_s / 1e9)
    ap.add_argument("--object-gbps", type=float, default=c.object_bytes_per_s / 1e9)
    ap.add_argument("--pcie-gbps", type=float, default=c.pcie_bytes_per_s / 1e9)
    ap.add_argument("--load-overhead-ms", type=float, default=c.load_overhead_s * 1000)
    ap.add_argument("--prefill-tps", type=float, default=c.prefill_tokens_per_s)
    ap.add_argument("--decode-step-ms", type=float, default=c.decode_step_s * 1000)
    ap.add_argument("--max-num-seqs", type=int, default=c.max_num_seqs)
    ap.add_argument("--prestaged", action="store_true", help="every version already on disk")
    ap.add_argument("--max-lora-rank", type=int, default=128)
    ap.add_argument("--pin-quota", type=int, help="pins per tenant per engine (default: GPU slots)")
    ap.add_argument("--pinned-rank-budget", type=int)
    ap.add_argument("--gold-min-residency", type=float, default=300.0, help="seconds")
    a = ap.parse_args(argv)
    if a.gpu_slots < 1 or a.cpu_slots < a.gpu_slots:
        ap.error("need 1 <= --gpu-slots <= --cpu-slots (vLLM's own constraint)")
    return a


def config_from(a: argparse.Namespace) -> SimConfig:
    cost = CostModel(
        disk_bytes_per_s=a.disk_gbps * 1e9,
        object_bytes_per_s=a.object_gbps * 1e9,
        pcie_bytes_per_s=a.pcie_gbps * 1e9,
        load_overhead_s=a.load_overhead_ms / 1000,
        prefill_tokens_per_s=a.prefill_tps,
        decode_step_s=a.decode_step_ms / 1000,
        max_num_seqs=a.max_num_seqs,
        prestaged=a.prestaged,
    )
    return SimConfig(
        gpu_slots=a.gpu_slots,
        cpu_slots=a.cpu_slots,
        engines=a.engines,
        sequential=a.sequential,
        cost=cost,
        max_lora_rank=a.max_lora_rank,
        pin_quota=a.pin_quota,
        pinned_rank_budget=a.pinned_rank_budget,
        gold_min_residency_s=a.gold_min_residency,
    )


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    metrics = simulate(load(a.trace), make_policy(a.policy), config_from(a))
    out = metrics.to_dict()
    if a.json:
        print(json.dumps({"policy": a.policy, **out}, indent=2))
        return 0
    print(f"policy {a.policy}: {out['requests']} requests")
    for key in ("gpu_hits", "cpu_hits", "cold_requests", "cold_loads", "gpu_loads"):
        print(f"  {key:<14} {out[key]}")
    print(f"  bytes_loaded   {out['bytes_loaded'] / 1e9:.2f} GB, evictions {out['evictions']}")
    print(f"  TTFT p50 {out['ttft_p50_ms']:.1f} ms, p99 {out['ttft_p99_ms']:.1f} ms")
    for slo, s in out["by_slo"].items():
        print(
            f"  {slo:<7} {s['requests']:>6} req, cold_loads {s['cold_loads']}, "
            f"p99 {s['ttft_p99_ms']:.1f} ms"
        )
    if out["refused_actions"]:
        print(f"  refused actions: {out['refused_actions']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

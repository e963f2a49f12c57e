"""Validation throughput against plain hashing of the same file, and the validator's peak memory.

    .venv/bin/python -m bench.validation_throughput [--sizes-mib 1024,256] [--repeat 3]
        [--write-docs]

Builds valid bf16 LoRA adapters (rank 64 on all 7 projections, Llama-70B dimensions, as many
layers as give the size) in a temporary folder, and in one run measures over the same file:
hashlib.sha256 with 1 MiB reads (the ceiling), the sha256sum tool, and the full validation
(hash, header, cross-check, names, shapes, finite values) in a child process, which also reports
its own peak RSS. Every file is read from the page cache (it was just written). The folder is
deleted at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.docs_section import DOCS, markers, write_section
from bench.upload_support import BIG_BASE_MODEL, BIG_HF_CONFIG, RANK, GeneratedAdapter

BEGIN, END = markers("validation")
CHUNK = 1024 * 1024
MB = 1_000_000


def build_adapter(folder: Path, target_bytes: int) -> tuple[Path, int]:
    """Write a valid adapter of about target_bytes, streaming (never the whole file in memory)."""
    adapter = GeneratedAdapter(target_bytes)
    return adapter.write(folder), adapter.layers


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def hashlib_speed(path: Path) -> tuple[float, float]:
    """(wall MB/s, CPU MB/s) of hashlib.sha256 over 1 MiB reads into one buffer."""
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    digest = hashlib.sha256()
    wall, cpu = time.perf_counter(), _cpu(resource.RUSAGE_SELF)
    with open(path, "rb", buffering=0) as handle:
        while got := handle.readinto(buffer):
            digest.update(view[:got])
    size = path.stat().st_size / MB
    return size / (time.perf_counter() - wall), size / (_cpu(resource.RUSAGE_SELF) - cpu)


def sha256sum_speed(path: Path) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN)
    subprocess.run(["sha256sum", str(path)], check=True, capture_output=True)
    size = path.stat().st_size / MB
    return size / (time.perf_counter() - wall), size / (_cpu(resource.RUSAGE_CHILDREN) - cpu)


def validate_in_child(folder: Path) -> dict[str, Any]:
    """Run the validation in a fresh process: its RSS is the validator's, not this script's."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.validation_throughput", "--child", str(folder)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return json.loads(out.stdout)


def child_main(folder: Path) -> None:
    from adapters.validation import BaseModelSpec, validate_adapter_dir

    spec = BaseModelSpec.from_hf_config(BIG_HF_CONFIG, BIG_BASE_MODEL)
    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wall, cpu = time.perf_counter(), _cpu(resource.RUSAGE_SELF)
    report = validate_adapter_dir(folder, base_model=spec, max_rank=RANK)
    wall, cpu = time.perf_counter() - wall, _cpu(resource.RUSAGE_SELF) - cpu
    result = {
        "wall": wall,
        "cpu": cpu,
        "valid": report.valid,
        "errors": report.error_codes[:5],
        "bytes": report.size_bytes,
        "baseline_kib": baseline_kib,
        "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    print(json.dumps(result))


def measure(folder: Path, repeat: int) -> dict[str, Any]:
    weights = folder / "adapter_model.safetensors"
    hashlib_speed(weights)  # warm the page cache: every method then reads from memory
    names = ("hashlib", "sha256sum", "validation", "ratio")
    runs: dict[str, list[float]] = {f"{n}_{k}": [] for n in names for k in ("wall", "cpu")}
    peaks, baselines = [], []
    for _ in range(repeat):  # interleaved, so drift in machine load hits all three alike
        hashed = hashlib_speed(weights)
        summed = sha256sum_speed(weights)
        child = validate_in_child(folder)
        if not child["valid"]:
            raise SystemExit(f"the bench adapter did not validate: {child['errors']}")
        validated = (child["bytes"] / MB / child["wall"], child["bytes"] / MB / child["cpu"])
        for k, index in (("wall", 0), ("cpu", 1)):
            runs[f"hashlib_{k}"].append(hashed[index])
            runs[f"sha256sum_{k}"].append(summed[index])
            runs[f"validation_{k}"].append(validated[index])
            runs[f"ratio_{k}"].append(validated[index] / hashed[index])
        peaks.append(child["peak_kib"])
        baselines.append(child["baseline_kib"])
    result: dict[str, Any] = {k: statistics.median(v) for k, v in runs.items()}
    result["ratios_wall"] = runs["ratio_wall"]
    result["ratios_cpu"] = runs["ratio_cpu"]
    result.update(
        bytes=weights.stat().st_size + (folder / "adapter_config.json").stat().st_size,
        peak_rss_mb=max(peaks) * 1024 / MB,
        baseline_rss_mb=max(baselines) * 1024 / MB,
    )
    return result


def render(results: list[dict[str, Any]], command: str, repeat: int, load: float) -> str:
    def runs(values: list[float]) -> str:
        return ", ".join(f"{x:.2f}" for x in values)

    lines = [
        BEGIN,
        "## Adapter validation throughput and memory",
        "",
        f"Command (one run produces every number below): `{command}`",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, numpy "
        f"{np.__version__}; files read from the page cache. Each run hashes with hashlib, then "
        f"sha256sum, then validates (in a child process); medians of {repeat} runs, ratios taken "
        "within each run. Wall-clock MB/s, and MB per CPU-second of the process in brackets: "
        "other work shares the 2 cores (load average "
        f"{load:.1f} at the start), which moves wall-clock numbers, not CPU time. MB = 10^6 bytes. "
        "Adapter: bf16, rank 64 on all 7 projections of Llama-3-70B dimensions, as many layers "
        "as give the size.",
        "",
        "| adapter | hashlib.sha256, 1 MiB reads | sha256sum | full validation "
        "| validation / hashlib, wall | validation / hashlib, CPU "
        "| peak RSS of the validating process (after imports) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['bytes'] / MB:,.0f} MB ({r['layers']} layers) "
            f"| {r['hashlib_wall']:,.0f} ({r['hashlib_cpu']:,.0f}) MB/s "
            f"| {r['sha256sum_wall']:,.0f} ({r['sha256sum_cpu']:,.0f}) MB/s "
            f"| {r['validation_wall']:,.0f} ({r['validation_cpu']:,.0f}) MB/s "
            f"| **{r['ratio_wall']:.2f}** (runs: {runs(r['ratios_wall'])}) "
            f"| **{r['ratio_cpu']:.2f}** (runs: {runs(r['ratios_cpu'])}) "
            f"| {r['peak_rss_mb']:.0f} MB ({r['baseline_rss_mb']:.0f} MB) |"
        )
    lines += [
        "",
        "Goals: validation / hashlib >= 0.8 in the same run; peak RSS flat in the file size and "
        "under 150 MB for 1 GiB. Full validation = sha256 of both files, strict header parse, "
        "safetensors-library cross-check of the header, names/shapes against the base model, "
        "and a NaN/Inf check of every value, in one streaming pass (1 MiB chunks).",
        END,
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes-mib", default="1024,256", help="adapter sizes, MiB, comma-separated"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument(
        "--dir", default=None, help="where to build the adapters (default: a temp dir)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(Path(args.child))
        return
    load = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="lp-bench-validation-", dir=args.dir))
    results = []
    try:
        for mib in (int(s) for s in args.sizes_mib.split(",")):
            folder, layers = build_adapter(root / f"adapter-{mib}", mib * 1024 * 1024)
            result = measure(folder, args.repeat)
            result["layers"] = layers
            results.append(result)
            print(json.dumps(result), flush=True)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    command = ".venv/bin/python -m bench.validation_throughput " + " ".join(
        a for a in sys.argv[1:] if a != "--write-docs"
    )
    section = render(results, command.strip(), args.repeat, load)
    print(section)
    if args.write_docs:
        write_section("validation", section)


if __name__ == "__main__":
    main()

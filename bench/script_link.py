"""The admission script's round trip, as the gateway runs it before every request: through
redis-py (`register_script`, the gateway's path until 2026-12-04, commit 9794106) against the lean path
(gateway.script_link), back to back and after idle gaps, in one process on one core.

    make bench-script-link   # REDIS_URL defaults to DB 10 there
    .venv/bin/python -m bench.script_link [--rounds 300] [--gaps-ms 0,5,20,50] [--cpu 1] [--write-docs]

Each round sends the real admission script (gateway.limits: rate, the tenant's and the version's
in-flight counts, the engine's in-flight hash, the ledger) once through each path, in alternating
order, then the release script, after sleeping the gap (nothing else runs in between, as on a
gateway between one caller's requests). Times are from the call to its answer. REDIS_URL names
the server (its database is used for keys under `lp:bench:sl:`, deleted afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # a development SECRET_KEY: no page is served

import django  # noqa: E402

django.setup()

import uvloop  # noqa: E402

from bench.docs_section import markers, write_section  # noqa: E402
from bench.gateway_support import percentile  # noqa: E402
from gateway.app import gateway_redis  # noqa: E402
from gateway.script_link import ScriptLink  # noqa: E402
from workers.redis_contract import scripts as lua  # noqa: E402

SECTION = "script-link"
PATHS = ("redis-py", "lean")


async def measure(rounds: int, gaps_ms: list[float]) -> dict[float, dict[str, list[float]]]:
    client = gateway_redis("lp-bench-script-link")
    link = ScriptLink(client)
    scripts: dict[str, tuple[Any, Any]] = {
        "redis-py": (client.register_script(lua.ENTER), client.register_script(lua.LEAVE)),
        "lean": (link.script(lua.ENTER), link.script(lua.LEAVE)),
    }
    ledger = "lp:bench:sl:held"
    keys = ["lp:bench:sl:rpm", "lp:bench:sl:t", "lp:bench:sl:c", "lp:bench:sl:e", "lp:bench:sl:p"]
    out: dict[float, dict[str, list[float]]] = {}
    try:
        for gap in gaps_ms:
            times: dict[str, list[float]] = {p: [] for p in PATHS}
            for i in range(rounds + 20):  # the first 20 rounds warm both paths
                order = PATHS if i % 2 == 0 else PATHS[::-1]
                for path in order:
                    enter, leave = scripts[path]
                    request = f"{ledger}#{path}{i}"
                    if gap:
                        await asyncio.sleep(gap / 1000)
                    started = time.perf_counter()
                    status, _ = await enter(keys=[*keys, request], args=[0, 0, 0, 1, "a", 2])
                    took = (time.perf_counter() - started) * 1000
                    assert status == 0, status
                    await leave(keys=[keys[1], keys[2], keys[3], request], args=[1, 1, "a"])
                    if i >= 20:
                        times[path].append(took)
            out[gap] = times
    finally:
        await client.delete(*keys, ledger)
        await link.aclose()
        await client.aclose()
    return out


def render(result: dict[float, dict[str, list[float]]], command: str, cpu: int) -> str:
    begin, end = markers(SECTION)
    rows = []
    for gap, times in result.items():
        a, b = times["redis-py"], times["lean"]
        rows.append(
            f"| {gap:g} | {len(a)} | {statistics.median(a):.3f} / {percentile(a, 0.9):.3f} | "
            f"{statistics.median(b):.3f} / {percentile(b, 0.9):.3f} | "
            f"**{statistics.median(a) - statistics.median(b):+.3f}** |"
        )
    load = os.getloadavg()[0]
    return "\n".join(
        [
            begin,
            "## The admission script's round trip: redis-py against the lean path",
            "",
            f"Command: `{command}`",
            "",
            f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python "
            f"{platform.python_version()}, uvloop; this process on core {cpu}; Redis on "
            f"loopback; load average {load:.2f}. The gateway's admission script (gateway.limits, "
            "with its ledger) sent once through each path per round, alternating which goes "
            "first, each after sleeping the gap; then its release. Milliseconds from the call to "
            "the answer.",
            "",
            "| idle gap before each call, ms | calls per path | redis-py p50 / p90 ms | "
            "lean path p50 / p90 ms | saved at the p50, ms |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "The lean path (gateway.script_link) is hiredis's packer and reader on an asyncio "
            "Protocol with one timer per round trip; redis-py adds its pool's condition, a retry "
            "wrapper, timeout scopes around each read and write and a stream layer, which cost "
            "little warm and several times more on a core that has been idle (docs/benchmarks.md, "
            "'Where the p50 goes').",
            end,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--gaps-ms", default="0,5,20,50")
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    result = uvloop.run(measure(args.rounds, gaps))
    command = (
        f".venv/bin/python -m bench.script_link --rounds {args.rounds} --gaps-ms {args.gaps_ms} "
        f"--cpu {args.cpu} --write-docs"
    )
    section = render(result, command, args.cpu)
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()

"""Redis memory per adapter and per tenant, measured with the gateway's own writer
(gateway.recorder.Recorder: metrics hashes, usage, the pools' demand history, conversation keys)
on this machine's Redis. docs/deploy.md sizes Redis from it.

    make bench-redis-footprint   # REDIS_URL names an empty database; it is emptied afterwards

Every adapter of every tenant gets one chat request in the same second; then each key's
`MEMORY USAGE` is read. A busy adapter (a request every second) has fields like these in each of
the 600 second-keys (kept 10 min) and 2,880 minute-keys (kept 2 days) at once, which gives the
steady-state upper bound per adapter.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # a development SECRET_KEY for the conversation keys

import django  # noqa: E402

django.setup()

from redis import Redis  # noqa: E402
from redis import asyncio as aioredis  # noqa: E402

from bench.docs_section import markers, write_section  # noqa: E402
from gateway.conversations import turn_of  # noqa: E402
from gateway.limits import Admission, Scripts, Terms  # noqa: E402
from gateway.recorder import MINUTE_TTL_S, SECOND_TTL_S, USAGE_TTL_S, Measurement, Recorder  # noqa: E402
from workers.shared_state import DEMAND_HISTORY_MAX  # noqa: E402

SECTION = "redis-footprint"
COLUMNS = [
    "tenants x adapters", "second-key B", "minute-key B", "usage-day B", "counters+histograms B",
    "demand entry B", "demand history per pool (cap)", "conversation key B (per chat, 30 min)",
    "tenant rate key B (per minute, 2 min)",
    "used_memory B", "busy adapter",
]  # fmt: skip
HEADER = "| " + " | ".join(COLUMNS) + " |\n" + "|---" * len(COLUMNS) + "|"


def measurements(tenants: int, adapters: int, at: float) -> list[Measurement]:
    out = []
    for t in range(tenants):
        for a in range(adapters):
            served = f"tenant{t:04d}--adapter{a:03d}--v1-1f2e3d4c"
            messages = [{"role": "user", "content": f"question {t} {a}"}]
            out.append(
                Measurement(
                    tenant=f"tenant{t:04d}", tenant_id=t + 1, adapter=f"adapter{a:03d}",
                    version=f"adapter{a:03d}@1", version_id=t * adapters + a + 1, pool="shared",
                    served_name=served, engine="gpu-a", served_from="gpu", ok=True,
                    ttft_ms=42.0, e2e_ms=420.0, prompt_tokens=100, completion_tokens=50,
                    at=at, turn=turn_of(messages, t + 1, served),
                )
            )  # fmt: skip
    return out


def usage(client: Redis, pattern: str) -> tuple[int, int]:
    keys = list(client.scan_iter(match=pattern, count=1000))
    return len(keys), sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)


async def record(url: str, batch: list[Measurement]) -> None:
    redis = aioredis.Redis.from_url(url)
    recorder = Recorder(redis)
    for m in batch:
        recorder.add(m)
    await recorder.flush()
    # Each tenant's request rate, counted by the gateway's admission (a counter per minute).
    scripts = Scripts(redis)
    for tenant_id in sorted({m.tenant_id for m in batch}):
        admission = Admission(
            scripts, Terms(tenant_id=tenant_id, rpm_limit=0, target=None, requested=None)
        )
        await admission.admit()
    await redis.aclose()


def run(url: str, tenants: int, adapters: int) -> dict[str, float]:
    client = Redis.from_url(url)
    if client.dbsize():
        raise SystemExit(f"{url} is not empty: give the benchmark a database of its own")
    before = int(client.info("memory")["used_memory"])
    at = float(int(time.time()))
    asyncio.run(record(url, measurements(tenants, adapters, at)))
    n = tenants * adapters
    per = {
        "second": usage(client, "lp:gwm:sec:*")[1] / n,
        "minute": usage(client, "lp:gwm:min:*")[1] / n,
        "usage": usage(client, "lp:usage:*")[1] / n,
        "counters": (usage(client, "lp:gwm:counters")[1] + usage(client, "lp:gwm:ttft")[1]
                     + usage(client, "lp:gwm:e2e")[1]) / n,
        # per entry kept: the list keeps the newest DEMAND_HISTORY_MAX
        "demand": usage(client, "lp:fleet:demand:*")[1] / min(n, DEMAND_HISTORY_MAX),
        "conversation": usage(client, "lp:conv:*")[1] / n,
        "tenant_rate": usage(client, "lp:gw:rpm:*")[1] / tenants,
        "used_memory": (int(client.info("memory")["used_memory"]) - before) / n,
    }  # fmt: skip
    client.flushdb()
    per["busy_adapter"] = (
        per["second"] * SECOND_TTL_S
        + per["minute"] * (MINUTE_TTL_S // 60)
        + per["usage"] * (USAGE_TTL_S // 86400)
        + per["counters"]
    )
    # The pool's demand history is a list capped at DEMAND_HISTORY_MAX entries: per pool, not
    # per adapter.
    per["demand_pool"] = per["demand"] * DEMAND_HISTORY_MAX
    return per


def section(results: list[tuple[int, int, dict[str, float]]], command: str) -> str:
    begin, end = markers(SECTION)
    rows = "\n".join(
        f"| {t} x {a} | {r['second']:.0f} | {r['minute']:.0f} | {r['usage']:.0f} | "
        f"{r['counters']:.0f} | {r['demand']:.0f} | {r['demand_pool'] / 1024:.0f} KiB | "
        f"{r['conversation']:.0f} | {r['tenant_rate']:.0f} | {r['used_memory']:.0f} | "
        f"{r['busy_adapter'] / 1024**2:.2f} MiB |"
        for t, a, r in results
    )
    return f"""{begin}
## Redis memory per adapter (`bench/redis_footprint.py`)

`{command}` (`make bench-redis-footprint`), Redis {Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")).info("server")["redis_version"]}
on this machine. Every adapter gets one chat request in the same second through the gateway's
own recorder (`gateway.recorder.Recorder`); bytes are `MEMORY USAGE` of each key, divided by the
adapters. A busy adapter (a request every second) has such fields in 600 second-keys, 2,880
minute-keys and 8 usage days at once: the last column, the steady-state bound per adapter.
A pool's demand history is a list capped at {DEMAND_HISTORY_MAX:,} requests: its bound is per pool.
A tenant's own key is its request-rate counter (the gateway's admission; one a minute, kept
2 min); everything else is per adapter.

{HEADER}
{rows}
{end}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes", default="10x10,100x10", help="tenants x adapters, comma-separated"
    )
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    results = []
    for shape in args.shapes.split(","):
        tenants, adapters = (int(x) for x in shape.split("x"))
        result = run(url, tenants, adapters)
        results.append((tenants, adapters, result))
        print(shape, {k: round(v, 1) for k, v in result.items()})
    if args.write_docs:
        write_section(
            SECTION,
            section(
                results, f"python -m bench.redis_footprint --shapes {args.shapes} --write-docs"
            ),
        )


if __name__ == "__main__":
    main()

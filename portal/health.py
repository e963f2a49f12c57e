"""/healthz: the state of every part the portal needs. Operators get it checked live; anyone
else gets the last result up to HEALTHZ_CACHE_SECONDS old, and concurrent misses share one check,
so a flood of anonymous probes costs one Celery ping and one probe per engine per period."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from portal.celery import app as celery_app


def check_database() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return {"ok": True, "vendor": connection.vendor}
    except Exception as exc:  # noqa: BLE001 - any failure means down
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def check_redis() -> dict[str, Any]:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
        )
        client.ping()
        return {"ok": True}
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def check_celery() -> dict[str, Any]:
    try:
        replies = celery_app.control.ping(timeout=settings.HEALTHZ_CELERY_TIMEOUT) or []
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "workers": [], "error": f"{type(exc).__name__}: {exc}"}
    workers = sorted(name for reply in replies for name in reply)
    return {
        "ok": bool(workers),
        "workers": workers,
        **({} if workers else {"error": "no worker answered a ping"}),
    }


async def _check_engine(engine: Any) -> dict[str, Any]:
    from workers.selectors import engine_key, engine_key_refusal
    from workers.services.engines import probe_engine

    started = time.perf_counter()
    error = engine_key_refusal(engine) or await probe_engine(engine.url, engine_key(engine))
    state = {
        "ok": not error,
        "name": engine.name,
        "state": engine.state,
        "required": engine.required,
    }
    if error:
        return {**state, "error": error}
    return {**state, "latency_ms": round((time.perf_counter() - started) * 1000, 1)}


async def check_engines() -> list[dict[str, Any]]:
    from workers.models import Engine

    engines = await sync_to_async(lambda: list(Engine.objects.all()))()
    return list(await asyncio.gather(*(_check_engine(engine) for engine in engines)))


async def health_report() -> tuple[bool, dict[str, Any]]:
    database, redis_state, celery_state = await asyncio.gather(
        sync_to_async(check_database, thread_sensitive=True)(),
        asyncio.to_thread(check_redis),
        asyncio.to_thread(check_celery),
    )
    engines = await check_engines() if database["ok"] else []
    healthy = (
        database["ok"]
        and redis_state["ok"]
        and celery_state["ok"]
        and all(engine["ok"] for engine in engines if engine["required"])
    )
    return healthy, {
        "status": "ok" if healthy else "degraded",
        "database": database,
        "redis": redis_state,
        "celery": celery_state,
        "engines": engines,
    }


_last: tuple[float, bool, dict[str, Any]] | None = None
_running: dict[asyncio.AbstractEventLoop, asyncio.Task[tuple[bool, dict[str, Any]]]] = {}


async def _check_and_keep() -> tuple[bool, dict[str, Any]]:
    global _last
    healthy, report = await health_report()
    _last = (time.monotonic(), healthy, report)
    return healthy, report


async def cached_health_report() -> tuple[bool, dict[str, Any]]:
    """The last report if it is fresh enough, else one check shared by every caller waiting."""
    if _last is not None and time.monotonic() - _last[0] < settings.HEALTHZ_CACHE_SECONDS:
        return _last[1], _last[2]
    loop = asyncio.get_running_loop()
    task = _running.get(loop)
    if task is None:
        task = _running[loop] = loop.create_task(_check_and_keep())
        task.add_done_callback(lambda _: _running.pop(loop, None))
    return await asyncio.shield(task)


def forget_cached_report() -> None:
    """For tests and operators' fresh checks: the next anonymous probe checks again."""
    global _last
    _last = None


def redact_report(report: dict[str, Any]) -> dict[str, Any]:
    """What anonymous probes may see: up or down per part, no error texts, hosts or worker names."""

    def part(state: dict[str, Any]) -> dict[str, Any]:
        return {"ok": state["ok"]}

    return {
        "status": report["status"],
        "database": part(report["database"]),
        "redis": part(report["redis"]),
        "celery": {
            "ok": report["celery"]["ok"],
            "workers": len(report["celery"].get("workers", [])),
        },
        "engines": [
            {"name": e["name"], "ok": e["ok"], "required": e["required"]} for e in report["engines"]
        ],
    }

"""The web shell's plain views: health, and the answer when no view could give one."""

from __future__ import annotations

import sys

import psycopg
import redis
from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from adapters.access import AccessContext
from portal.health import cached_health_report, health_report, redact_report


async def healthz(request: HttpRequest) -> JsonResponse:
    """Open to probes, which get a recent result, redacted; operators get a fresh check and the
    reasons (they can name internal hosts)."""
    user = await request.auser()
    if user.is_authenticated and await sync_to_async(_sees_engines)(user):
        healthy, report = await health_report()
    else:
        healthy, cached = await cached_health_report()
        report = redact_report(cached)
    return JsonResponse(report, status=200 if healthy else 503)


def _sees_engines(user) -> bool:
    return AccessContext.for_user(user).sees_engines


# The database is away (restarting, failing over, refusing connections, the pool out of time):
# what any request that reached it meanwhile raises.
DATABASE_AWAY = (OperationalError, InterfaceError, psycopg.OperationalError)
DATABASE_RETRY_AFTER_S = 5
# Redis is away (restarting, stalled past the clients' timeouts): sign-in, whose throttle counts
# attempts there, refuses rather than check a password it cannot count (core.login_guard).
REDIS_AWAY = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: what no view answered. JSON with a code under /api/ (as every API error is),
    a 503 with Retry-After when the database or Redis is away, so clients and load balancers
    retry."""
    exc = sys.exc_info()[1]
    away = isinstance(exc, DATABASE_AWAY + REDIS_AWAY)
    status = 503 if away else 500
    if isinstance(exc, DATABASE_AWAY):
        _renew_database_pool()
        code, message = (
            "service.database_unavailable",
            "The portal's database is unavailable for a moment; retry shortly.",
        )
    elif away:
        code, message = (
            "service.unavailable",
            "A service the portal needs (Redis) is unavailable for a moment; retry shortly.",
        )
    else:
        code, message = "server_error", "The portal failed on its side; retry, or report it."
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {"error": {"code": code, "message": message}}, status=status
        )
    else:
        response = HttpResponse(
            f"<!doctype html><title>{status}</title><h1>{message}</h1>",
            status=status,
            content_type="text/html; charset=utf-8",
        )
    if away:
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
    return response


def _renew_database_pool() -> None:
    """The database cut this connection, and after a restart or failover it cut every other one
    in the pool too: replace them all now, so one request fails, not one per dead connection.
    (psycopg_pool's own check would back off 1, 2, 4... s per dead one and time out the
    request instead: tests/faults/test_postgres_down.py.)"""
    from django.db import connection

    pool = getattr(connection, "pool", None)
    if pool is not None:
        pool.drain()

"""Failed sign-ins: the lockout answer (django-axes counts them in Redis) and a bounded audit trail.

django-axes counts failures per client address (core.client_ip) in the shared cache and refuses
authentication once LOGIN_FAILURE_LIMIT is reached, for LOGIN_LOCKOUT_SECONDS, on every path that
calls `authenticate` with the request: the page login, the admin login and the token endpoint.

A flood of failed sign-ins must not become a flood of chained audit rows (each append locks the
chain head, so every audited write in the portal would queue behind them). Failures are counted in
Redis per (address, username); one row is written per pair and window, carrying how many failures
it stands for, and never more than LOGIN_FAILED_AUDIT_PER_MINUTE rows a minute in all. Other
unauthenticated edges (single sign-on's token trade and back-channel logout) audit their refusals
the same way (`record_failure_sampled`).
"""

from __future__ import annotations

import functools
import hashlib
import time

import redis
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from core.audit import record_event
from core.client_ip import client_ip
from core.errors import ApplicationError

KEY_PREFIX = "lp:login-audit"
LOCKED_OUT_CODE = "auth.locked_out"


def locked_out_error() -> ApplicationError:
    minutes = max(1, round(settings.LOGIN_LOCKOUT_SECONDS / 60))
    return ApplicationError(
        LOCKED_OUT_CODE,
        f"Too many failed sign-ins from your address. Try again in {minutes} minutes.",
        status=429,
        retry_after=settings.LOGIN_LOCKOUT_SECONDS,
    )


def lockout_response(
    request: HttpRequest, original_response=None, credentials=None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: JSON with a code under /api/, the sign-in page's error otherwise."""
    error = locked_out_error()
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {"error": {"code": error.code, "message": error.message}}, status=error.status
        )
    else:
        response = render(request, "portal/error.html", {"error": error}, status=error.status)
    response["Retry-After"] = str(settings.LOGIN_LOCKOUT_SECONDS)
    return response


@functools.cache
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


def _pair_key(address: str, username: str) -> str:
    # The username is hashed: it is whatever the caller typed, of any length.
    return f"{KEY_PREFIX}:pair:{address}:{hashlib.sha256(username.encode()).hexdigest()[:32]}"


def record_login_failure(*, username: str, request: HttpRequest | None) -> bool:
    """Count one failed sign-in; write an audit row if this pair's window and the budget allow.

    Returns whether a row was written.
    """
    address = client_ip(request) if request is not None else ""
    return record_failure_sampled(
        action="auth.login_failed",
        actor="anonymous",
        object_type="auth.user",
        object_id=username,
        subject=username,
        after={"client_ip": address},
        request=request,
    )


def record_failure_sampled(
    *,
    action: str,
    actor: str,
    object_type: str,
    object_id: str,
    subject: str,
    after: dict,
    request: HttpRequest | None,
    count: int = 1,
) -> bool:
    """Count `count` failures of an unauthenticated caller (one, or those its process counted
    meanwhile), and audit them as `action` at most once per (address, subject) and
    LOGIN_FAILED_AUDIT_WINDOW_SECONDS, with `failures`: how many that row stands for; never more
    than LOGIN_FAILED_AUDIT_PER_MINUTE rows of one action a minute (a flood from many
    addresses): the next row written says how many were left out before it
    (`unaudited_before`), so the chain keeps the flood's size.

    Returns whether a row was written.
    """
    address = client_ip(request) if request is not None else ""
    pair = _pair_key(address, subject)
    client = _redis(settings.REDIS_URL)
    window = settings.LOGIN_FAILED_AUDIT_WINDOW_SECONDS
    pipe = client.pipeline()
    pipe.incr(f"{pair}:count", count)
    pipe.expire(f"{pair}:count", 24 * 3600)
    pipe.set(f"{pair}:gate", 1, nx=True, ex=window)
    _, _, opened = pipe.execute()
    if not opened:
        return False
    # auth.login_failed keeps its key of before; each other action has a budget of its own.
    scope = "" if action == "auth.login_failed" else f"{action}:"
    budget_key = f"{KEY_PREFIX}:budget:{scope}{int(time.time() // 60)}"
    pipe = client.pipeline()
    pipe.incr(budget_key)
    pipe.expire(budget_key, 120)
    spent, _ = pipe.execute()
    unaudited = f"{KEY_PREFIX}:unaudited:{action}"
    if spent > settings.LOGIN_FAILED_AUDIT_PER_MINUTE:
        # Over budget: keep counting; the pair's next failure after the budget frees is audited,
        # and the next row of this action says how many windows went unaudited meanwhile.
        pipe = client.pipeline()
        pipe.delete(f"{pair}:gate")
        pipe.incr(unaudited)
        pipe.expire(unaudited, 24 * 3600)
        pipe.execute()
        return False
    failures = int(client.getdel(f"{pair}:count") or 1)
    skipped = int(client.getdel(unaudited) or 0)
    record_event(
        action=action,
        actor=actor,
        object_type=object_type,
        object_id=object_id,
        after={**after, "failures": failures, **({"unaudited_before": skipped} if skipped else {})},
        request_id=getattr(request, "request_id", "") if request is not None else "",
    )
    return True


def clear_login_counters(address: str) -> None:
    """Forget one address's failed sign-ins: its lockout, token throttle and audit windows.

    For tests, and for an operator who must lift a lockout at once (`manage.py shell`)."""
    from axes.utils import reset

    reset(ip=address)
    cache.delete(f"throttle_login_{address}")
    client = _redis(settings.REDIS_URL)
    keys = list(client.scan_iter(match=f"{KEY_PREFIX}:pair:{address}:*", count=1000))
    if keys:
        client.delete(*keys)

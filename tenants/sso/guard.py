"""The unauthenticated edges of single sign-on (the CLI's token trade, back-channel logout, the
callback's bad state) refuse a flood cheaply: their failures count towards the sign-in lockout
per client address (django-axes, core/login_guard.py: LOGIN_FAILURE_LIMIT failures lock the
address out for LOGIN_LOCKOUT_SECONDS, on these edges and the password sign-ins alike), a
locked-out address is refused before anything is parsed or verified, and the refusals are
audited once per address, edge and window with their count, not once each (the refusals of a
locked-out address too, once per address and window).

The callback's refusals while a sign-in is under way stay one audit row each: reaching them needs
a state this browser started.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from axes.handlers.proxy import AxesProxyHandler
from django.http import HttpRequest

from core.client_ip import client_ip
from core.errors import ApplicationError
from core.login_guard import locked_out_error, record_failure_sampled

# Refusals that do not count towards the lockout: a replayed logout token carries the
# provider's valid signature (a provider retrying a delivery), and a bad state is a browser's
# back button as often as anything else; both are still audited.
NOT_COUNTED = {"sso.replayed", "sso.bad_state"}


# A locked-out address is remembered in the process this long, and its refusals counted here
# meanwhile: a flood from it then costs no Redis round trip per request. The lockout itself
# (LOGIN_LOCKOUT_SECONDS, shared by every replica) is read again when this expires, so a lockout
# lifted by hand (core.login_guard.clear_login_counters) is lifted here within it.
LOCKED_MEMO_SECONDS = 5.0
_locked_until: dict[str, float] = {}
_refused_while_locked: Counter[str] = Counter()
_memo_lock = threading.Lock()


def locked_out(request: HttpRequest, *, edge: str) -> ApplicationError | None:
    """The 429 for an address locked out by its failures (counted, and audited once per
    address and window with how many were refused); None when it may go on."""
    address = client_ip(request)
    now = time.monotonic()
    with _memo_lock:
        if _locked_until.get(address, 0.0) > now:
            _refused_while_locked[address] += 1
            return locked_out_error()
        _locked_until.pop(address, None)
        earlier = _refused_while_locked.pop(address, 0)
    if not AxesProxyHandler.is_locked(request):
        return None
    with _memo_lock:
        if len(_locked_until) > 10_000:  # a flood from very many addresses: forget the oldest
            _locked_until.clear()
        _locked_until[address] = now + LOCKED_MEMO_SECONDS
    error = locked_out_error()
    record_failure_sampled(
        action="sso.refused",
        actor="sso",
        object_type="sso.provider",
        object_id="",
        subject="sso:locked-out",
        after={"code": error.code, "what": edge, "client_ip": address},
        request=request,
        count=earlier + 1,
    )
    return error


def record_refusal(request: HttpRequest, *, edge: str, provider: str, code: str) -> None:
    """One refusal at `edge` (cli, backchannel-logout, callback)."""
    if code not in NOT_COUNTED:
        AxesProxyHandler.user_login_failed(
            sender=__name__, credentials={"username": f"sso:{edge}"}, request=request
        )
        # The failure that reaches the limit keeps this edge's own answer (AxesMiddleware would
        # swap it for its page); the next request is refused by locked_out(), in the edge's form.
        request.axes_locked_out = False  # type: ignore[attr-defined]
    record_failure_sampled(
        action="sso.refused",
        actor=f"sso:{provider}" if provider else "sso",
        object_type="sso.provider",
        object_id=provider,
        subject=f"sso:{edge}:{provider}",
        after={
            "code": code,
            "provider": provider or None,
            "what": edge,
            "client_ip": client_ip(request),
        },
        request=request,
    )


def forget_lockouts() -> None:
    """This process's memory of locked-out addresses (tests; the shared lockout stays)."""
    with _memo_lock:
        _locked_until.clear()
        _refused_while_locked.clear()

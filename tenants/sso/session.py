"""Middleware: an SSO session lives only while its provider still vouches for the person."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect

from core.audit import record_event
from core.request import PortalRequest
from tenants.sso import oidc
from tenants.sso.models import SsoIdentity
from tenants.sso.sealing import unseal
from tenants.sso.services.recheck import recheck_session

ENDED_MESSAGE = "Your single sign-on session has ended ({code}); sign in again."


class SsoSessionRecheck:
    """After AuthenticationMiddleware. Ends the session when the provider logged the person out
    (back-channel), and re-checks it against the provider when its ID token expires."""

    def __init__(self, get_response: Callable[[PortalRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: PortalRequest) -> HttpResponse:
        session = getattr(request, "session", None)
        if (
            session is not None
            and session.get(oidc.SESSION_PROVIDER)
            and request.user.is_authenticated
        ):
            ended = self._check(request)
            if ended is not None:
                return self._end(request, ended)
        return self.get_response(request)

    def _check(self, request: PortalRequest) -> str | None:
        session = request.session
        identity = SsoIdentity.objects.filter(
            user=request.user,
            provider=session[oidc.SESSION_PROVIDER],
            subject=session.get(oidc.SESSION_SUBJECT, ""),
        ).first()
        if identity is None:
            return "sso.identity_gone"
        signed_in = session.get(oidc.SESSION_SIGNED_IN_AT, 0.0)
        if identity.sessions_ended_at and identity.sessions_ended_at.timestamp() >= signed_in:
            return "sso.logged_out"
        if time.time() < session.get(oidc.SESSION_RECHECK_AT, 0.0):
            return None
        result = recheck_session(
            identity=identity,
            provider_name=session[oidc.SESSION_PROVIDER],
            # The identity's token, sealed at rest (never in the session): the scheduled re-check
            # rotates the same one.
            refresh_token=unseal(identity.refresh_token_sealed),
            request_id=getattr(request, "request_id", ""),
        )
        if result.ended is None:
            session[oidc.SESSION_RECHECK_AT] = result.recheck_at
        return result.ended

    def _end(self, request: PortalRequest, code: str) -> HttpResponse:
        record_event(
            action="sso.session_ended",
            actor=request.user,
            obj=request.user,
            object_id=request.user.get_username(),
            after={"code": code},
            request_id=getattr(request, "request_id", ""),
        )
        logout(request)
        if request.path.startswith("/api/"):
            return JsonResponse(
                {"error": {"code": code, "message": ENDED_MESSAGE.format(code=code)}}, status=401
            )
        messages.warning(request, ENDED_MESSAGE.format(code=code))
        return redirect("login")

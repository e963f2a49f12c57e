"""GET /metrics: the fleet's Prometheus text, for operators, platform admins and superusers.

Prometheus scrapes with `Authorization: Bearer <token>` (an unbound token with the read scope,
authenticated the way the REST API does it); people may also look with their session.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from prometheus_client.exposition import choose_encoder
from rest_framework.exceptions import AuthenticationFailed

from adapters.access import AccessContext
from tenants.authentication import BearerTokenAuthentication
from tenants.models import TokenScope
from workers.metrics import fleet_registry


def _error(code: str, message: str, status: int) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = BearerTokenAuthentication.keyword
    return response


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    try:
        bearer = BearerTokenAuthentication().authenticate(request)
    except AuthenticationFailed as exc:
        return _error("not_authenticated", str(exc.detail), 401)
    if bearer is not None:
        # What DRF would set; AccessContext.for_request reads the token from request.auth.
        request.user, request.auth = bearer  # type: ignore[attr-defined]
    access = AccessContext.for_request(request)
    if not access.is_authenticated:
        return _error("not_authenticated", "Log in or send 'Authorization: Bearer <token>'.", 401)
    if not access.has_scope(TokenScope.READ):
        return _error("token.missing_scope", "This token lacks the 'read' scope.", 403)
    if access.bound_tenant_id is not None:
        return _error(
            "token.tenant_bound",
            "This token is bound to one tenant; fleet metrics need an unbound token.",
            403,
        )
    if not access.sees_engines:
        return _error("permission_denied", "Fleet metrics are for operators and admins.", 403)
    # The format the scraper asks for (text 0.0.4 by default, OpenMetrics on request), as
    # prometheus_client's own exporters negotiate it.
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = HttpResponse(encode(fleet_registry()), content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response

"""The CLI's two sign-in edges: which providers it may use, and the ID-token-for-token trade.
JSON, before any session (like /api/v1/auth/token/), errors as `{"error": {code, message}}`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from core.errors import ApplicationError
from core.json_depth import loads_bounded
from tenants.sso.guard import locked_out, record_refusal
from tenants.sso.providers import configured_providers
from tenants.sso.services.cli import cli_token_exchange


@require_GET
def cli_providers(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {
            "providers": [
                {"name": p.name, "label": p.label, "issuer": p.issuer, "client_id": p.cli_client_id}
                for p in configured_providers()
                if p.cli_client_id
            ]
        }
    )


# The body nests 2 levels; deeper was a RecursionError, a 500.
MAX_BODY_DEPTH = 8
SHAPE = (
    "Send a JSON object: {provider: string, id_token: string, scopes: [string], "
    "tenant?: string, expires_in_days?: integer, name?: string}."
)


@csrf_exempt
@require_POST
def cli_token(request: HttpRequest) -> JsonResponse:
    """{provider, id_token, scopes, tenant?, expires_in_days?, name?} -> 201 {token, ...}.
    An address locked out by its failures is refused first (tenants/sso/guard.py)."""
    refused = locked_out(request, edge="cli")
    if refused is not None:
        return _error(refused.code, refused.message, refused.status, settings.LOGIN_LOCKOUT_SECONDS)
    body: dict[str, Any] = {}
    try:
        body = loads_bounded(request.body or b"{}", MAX_BODY_DEPTH)
        wrong = _wrong_fields(body)
        if wrong:
            return _error("invalid_request", wrong, 400)
        issued = cli_token_exchange(
            provider=body.get("provider", ""),
            id_token=body.get("id_token", ""),
            scopes=list(body.get("scopes") or []),
            tenant=body.get("tenant") or None,
            expires_in_days=body.get("expires_in_days", 90),
            name=body.get("name", "")[:100],
            request_id=getattr(request, "request_id", ""),
        )
    except ValueError:
        return _error("invalid_request", SHAPE, 400)
    except ApplicationError as exc:
        if exc.code.startswith("sso."):
            provider = str(body.get("provider", ""))[:64]
            record_refusal(request, edge="cli", provider=provider, code=exc.code)
        return _error(exc.code, exc.message, exc.status)
    token = issued.token
    return JsonResponse(
        {
            "token": issued.plaintext,
            "prefix": token.prefix,
            "scopes": token.scopes,
            "tenant": token.tenant.slug if token.tenant else None,
            "expires_at": token.expires_at.isoformat() if token.expires_at else None,
        },
        status=201,
    )


def _wrong_fields(body: Any) -> str:
    """What is wrong with the body's shape, in a sentence, or "" (checked before the service: a
    number for `scopes` was a TypeError, a 500, and an object for `provider` was read as its
    text)."""
    if not isinstance(body, dict):
        return SHAPE
    strings = ("provider", "id_token", "name")
    bad = [key for key in strings if not isinstance(body.get(key, ""), str)]
    scopes = body.get("scopes")
    if scopes is not None and not (
        isinstance(scopes, list) and all(isinstance(scope, str) for scope in scopes)
    ):
        bad.append("scopes")
    if not isinstance(body.get("tenant"), str | None):
        bad.append("tenant")
    days = body.get("expires_in_days", 90)
    if days is not None and (isinstance(days, bool) or not isinstance(days, int)):
        bad.append("expires_in_days")
    return f"{', '.join(bad)}: the wrong type. {SHAPE}" if bad else ""


def _error(code: str, message: str, status: int, retry_after: int | None = None) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response

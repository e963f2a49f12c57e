"""The CLI's two sign-in edges: which providers it may use, and the ID-token-for-token trade.
JSON, before any session (like /api/v1/auth/token/), errors as `{"error": {code, message}}`."""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from core.errors import ApplicationError
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


@csrf_exempt
@require_POST
def cli_token(request: HttpRequest) -> JsonResponse:
    """{provider, id_token, scopes, tenant?, expires_in_days?, name?} -> 201 {token, ...}.
    An address locked out by its failures is refused first (tenants/sso/guard.py)."""
    refused = locked_out(request, edge="cli")
    if refused is not None:
        return _error(refused.code, refused.message, refused.status, settings.LOGIN_LOCKOUT_SECONDS)
    body: dict = {}
    try:
        body = json.loads(request.body or b"{}")
        if not isinstance(body, dict):
            raise ValueError
        issued = cli_token_exchange(
            provider=str(body.get("provider", "")),
            id_token=str(body.get("id_token", "")),
            scopes=list(body.get("scopes") or []),
            tenant=body.get("tenant") or None,
            expires_in_days=body.get("expires_in_days", 90),
            name=str(body.get("name", ""))[:100],
            request_id=getattr(request, "request_id", ""),
        )
    except ValueError:
        return _error("invalid_request", "Send a JSON object.", 400)
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


def _error(code: str, message: str, status: int, retry_after: int | None = None) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response

"""The sign-in edges: start at a provider, its callback, the refusal page, back-channel logout."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from core.audit import record_event
from core.errors import ApplicationError
from tenants.access_port import access_for_request
from tenants.pageforms import require_platform_role
from tenants.pagekit import render_error
from tenants.sso import oidc
from tenants.sso.errors import SsoRefused
from tenants.sso.guard import locked_out, record_refusal
from tenants.sso.pages.mappings import dry_run_page
from tenants.sso.providers import Provider, configured_providers, provider_named
from tenants.sso.services.logout import backchannel_logout

# state -> {"provider": name, "dry_run": bool}, beside mozilla-django-oidc's own
SESSION_STATES = "sso_states"


class SsoStartView(OIDCAuthenticationRequestView):
    """/sso/<provider>/start/: to the provider's sign-in page, with state, nonce and PKCE."""

    def __init__(self, **kwargs: Any) -> None:  # the provider is known only per request
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)

    def get(self, request: HttpRequest, provider: str) -> HttpResponse:
        try:
            self.provider = provider_named(provider)
            self.OIDC_OP_AUTH_ENDPOINT = self.provider.endpoint("authorization_endpoint")
        except ApplicationError as exc:
            return refusal_page(request, SsoRefused(exc.code, exc.message, status=exc.status), None)
        self.OIDC_RP_CLIENT_ID = self.provider.client_id
        # A platform admin's dry run "as a test user": the provider asks for that person's
        # credentials (prompt=login); the answer is shown on the SSO page, nobody signs in here.
        self.dry_run = request.GET.get("dry_run") == "1"
        if self.dry_run:
            try:
                require_platform_role(
                    access_for_request(request), "is_platform_admin", "run a dry run"
                )
            except ApplicationError as exc:
                return render_error(request, exc)
        response = super().get(request)
        state = parse_qs(urlsplit(response["Location"]).query)["state"][0]
        request.session.setdefault(SESSION_STATES, {})[state] = {
            "provider": self.provider.name,
            "dry_run": self.dry_run,
        }
        request.session.modified = True
        return response

    def get_settings(self, attr: str, *args: Any) -> Any:
        return oidc.provider_settings(self.provider, attr, *args)

    def get_extra_params(self, request: HttpRequest) -> dict[str, str]:
        return {"prompt": "login"} if self.dry_run else {}


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """/sso/callback/: one for every provider (the state says which one started)."""

    provider: Provider | None = None

    def get(self, request: HttpRequest) -> HttpResponse:
        state = request.GET.get("state", "")
        started = request.session.get(SESSION_STATES, {}).pop(state, None)
        request.session.modified = True
        if started is None:
            return refusal_page(
                request,
                SsoRefused(
                    "sso.bad_state",
                    "This answer from the identity provider is not for a sign-in this browser "
                    "started (its state does not match). Start again from the sign-in page.",
                ),
                None,
            )
        self.provider = provider_named(started["provider"])
        request.sso_provider = self.provider  # type: ignore[attr-defined]
        request.sso_dry_run = started["dry_run"]  # type: ignore[attr-defined]
        if request.GET.get("error"):
            request.session.get("oidc_states", {}).pop(state, None)
            return refusal_page(
                request,
                SsoRefused(
                    "sso.provider_refused",
                    f"The identity provider refused the sign-in ({request.GET['error'][:100]}).",
                ),
                self.provider,
            )
        try:
            return super().get(request)
        except oidc.DryRunClaims as dry:
            return dry_run_page(request, self.provider, dry.claims)
        except SsoRefused as exc:
            return refusal_page(request, exc, self.provider)
        except (SuspiciousOperation, requests.RequestException):
            return refusal_page(
                request,
                SsoRefused(
                    "sso.exchange_failed",
                    "The identity provider did not complete the sign-in (the code exchange "
                    "failed). Start again from the sign-in page.",
                ),
                self.provider,
            )

    def get_settings(self, attr: str, *args: Any) -> Any:
        assert self.provider is not None
        return oidc.provider_settings(self.provider, attr, *args)

    def login_failure(self) -> HttpResponse:
        return refusal_page(
            self.request,
            SsoRefused("sso.failed", "The sign-in did not complete. Start again."),
            self.provider,
        )


def refusal_page(
    request: HttpRequest, refused: SsoRefused, provider: Provider | None
) -> HttpResponse:
    """A clear page, and the refusal in the audit log (nothing else was written)."""
    if request.user.is_authenticated and refused.code != "sso.bad_state":
        logout(request)
    if refused.code == "sso.bad_state":  # anyone can send one: audited with a count
        record_refusal(request, edge="callback", provider="", code=refused.code)
        return _refusal(request, refused)
    record_event(
        action="sso.refused",
        actor=f"sso:{provider.name}" if provider else "sso",
        after={"code": refused.code, "provider": provider.name if provider else None},
        request_id=getattr(request, "request_id", ""),
    )
    return _refusal(request, refused)


def _refusal(request: HttpRequest, refused: SsoRefused) -> HttpResponse:
    return render(
        request,
        "tenants/sso_refused.html",
        {"code": refused.code, "message": refused.message},
        status=refused.status,
    )


@csrf_exempt
@require_POST
def backchannel_logout_view(request: HttpRequest, provider: str) -> HttpResponse:
    """/sso/<provider>/backchannel-logout/: the provider ends a person's sessions (OpenID
    Connect Back-Channel Logout 1.0; a form field `logout_token`). An address locked out by
    its failures is refused first (tenants/sso/guard.py)."""
    refused = locked_out(request, edge="backchannel-logout")
    if refused is not None:
        return JsonResponse(
            {"error": refused.code, "message": refused.message},
            status=refused.status,
            headers={"Retry-After": str(settings.LOGIN_LOCKOUT_SECONDS)},
        )
    try:
        found = provider_named(provider)
        backchannel_logout(
            provider=found,
            logout_token=request.POST.get("logout_token", ""),
            request_id=getattr(request, "request_id", ""),
        )
    except ApplicationError as exc:
        record_refusal(request, edge="backchannel-logout", provider=provider[:64], code=exc.code)
        return JsonResponse({"error": exc.code, "message": exc.message}, status=400)
    return HttpResponse(status=200, headers={"Cache-Control": "no-store"})


class SignInView(LoginView):
    """The sign-in page: a button per identity provider, the password form while it is on."""

    template_name = "tenants/login.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_providers"] = configured_providers()
        context["local_passwords"] = settings.SSO_LOCAL_PASSWORDS
        return context

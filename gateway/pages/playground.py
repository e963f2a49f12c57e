"""The playground page: the picker of what this user may chat with, and the socket's address."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from gateway.playground import MAX_TOKENS
from gateway.playground_choices import playground_offer
from tenants.pagekit import page_view


@page_view
def playground(request: HttpRequest, tenant: str) -> HttpResponse:
    found, choices = playground_offer(user=request.user, tenant_slug=tenant)
    return render(
        request,
        "gateway/playground.html",
        {
            "tenant": found,
            "choices": choices,
            "versions": [c for c in choices if c.status != "base"],
            "max_tokens_limit": MAX_TOKENS,
        },
    )

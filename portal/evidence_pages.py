"""The printable page of a version's compliance record: the same signed record the API gives
(portal.evidence), laid out for people and for paper, with its JSON to download and verify."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from portal.evidence import version_evidence
from tenants.pagekit import access_for, page_view, render_page


@page_view
def version_evidence_page(
    request: HttpRequest, tenant: str, adapter: str, number: int
) -> HttpResponse:
    access = access_for(request)
    found = access.get_tenant(tenant)
    record = version_evidence(
        access=access,
        tenant=found,
        adapter=adapter,
        number=number,
        request_id=getattr(request, "request_id", ""),
    )
    kwargs = {"tenant": found.slug, "adapter": adapter, "number": number}
    return render_page(
        request,
        "portal/evidence.html",
        {
            "tenant": found,
            "record": record,
            "v": record["version"],
            "json_url": reverse("version-evidence", kwargs=kwargs),
            "key_url": reverse("evidence-key"),
            "version_url": reverse("version-detail", kwargs=kwargs),
            "validation": _validation(record["validation"]),
        },
    )


def _validation(report: dict[str, Any]) -> dict[str, Any]:
    """The report as the page shows it, whatever keys an older report lacks."""
    return {
        "present": bool(report),
        "valid": bool(report.get("valid")),
        "checks": [
            {
                "name": check.get("name", ""),
                "outcome": check.get("outcome", ""),
                "codes": check.get("codes", []),
            }
            for check in report.get("checks", [])
        ],
        "errors": [
            {"code": e.get("code", ""), "message": e.get("message", "")}
            for e in report.get("errors", [])
        ],
    }

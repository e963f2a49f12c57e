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
            "decisions": [
                {**d, "saw_lines": what_they_saw(d.get("saw"))} for d in record["decisions"]
            ],
        },
    )


def what_they_saw(saw: Any) -> list[str]:
    """A decision's evidence as a person reads it: a few lines, not the raw dictionary."""
    if not isinstance(saw, dict) or not saw:
        return []
    lines = []
    if "status" in saw:
        lines.append(f"Status when decided: {saw['status']}")
    report = saw.get("validation_report")
    if isinstance(report, dict):
        checks = report.get("checks") or []
        failed = [c.get("name", "") for c in checks if c.get("outcome") not in ("passed", "pass")]
        codes = [e.get("code", "") for e in report.get("errors") or []]
        valid = "valid" if report.get("valid") else "not valid"
        detail = f"{len(checks)} checks" + (f", failed: {', '.join(failed)}" if failed else "")
        lines.append(
            f"Validation: {valid} ({detail})" + (f"; errors {', '.join(codes)}" if codes else "")
        )
    if saw.get("manifest_sha256"):
        lines.append(f"Files: manifest sha256 {saw['manifest_sha256'][:16]}…")
    gate = saw.get("eval_gate")
    if isinstance(gate, dict):
        verdict = gate.get("verdict") or {}
        unmet = [c.get("message", "") for c in verdict.get("criteria", []) if not c.get("passed")]
        outcome = "passed" if verdict.get("passed") else "failed"
        suite = (gate.get("suite_sha256") or "")[:12]
        lines.append(
            f"Eval gate: {outcome} on run {gate.get('run') or 'none'}"
            + (f" (suite sha256 {suite}…)" if suite else "")
            + (f"; unmet: {'; '.join(unmet)}" if unmet else "")
        )
        override = gate.get("override")
        if isinstance(override, dict):
            lines.append(
                f"Gate overridden by {override.get('by')} (the gate refused "
                f"{override.get('first_reviewer')} first): “{override.get('reason')}”"
            )
    return lines


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

"""The tenant's eval page (suites, policies), and the eval gate on the version page (the
reviewer's page): the latest run's summary against the policy, then every case side by side
(candidate | serving now), regressions first, by tag. The version page's part is a panel of
adapters' page (adapters/page_panels.py), registered by EvalsConfig.ready()."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from adapters.models import AdapterVersion, VersionStatus
from adapters.page_panels import Panel
from adapters.selectors import adapter_get, adapters_for, version_get
from core.errors import ApplicationError
from core.request import PortalRequest
from evals.models import EvalPolicy, EvalRun, RunStatus
from evals.selectors import (
    case_rows,
    gate_verdict,
    latest_run,
    newer_suite_version,
    policy_of,
    refused_by,
    run_summary_dict,
    suites_of,
)
from evals.services.policies import policy_set
from evals.services.runner import RUNNABLE_STATUSES, run_request
from evals.services.suites import suite_limits, suite_upload
from tenants.access_port import Access
from tenants.pagekit import page_view, post_text, render_page, tenant_scope

TEMPLATE = "evals/_version_panel.html"


def _order(row: dict[str, Any]) -> int:
    """Regressions first, then failed must-pass cases, then other failures, then the rest (a
    stable sort: file order within each)."""
    failed = row["passed"]["candidate"] is False
    return 0 if row["regressed"] else 1 if row["must_pass"] and failed else 2 if failed else 3


def version_eval_panel(
    *, request: HttpRequest, access: Access, version: AdapterVersion
) -> Panel | None:
    policy = policy_of(version.adapter)
    run: EvalRun | None = latest_run(
        version=version, suite_version_id=policy.suite_version_id if policy else None
    )
    if policy is None and run is None:
        return None
    rows = case_rows(run) if run is not None else []
    tags = sorted({tag for row in rows for tag in row["tags"]})
    tag = request.GET.get("tag", "")
    shown = sorted(
        (
            {**row, "sides": (row["candidate"], row["baseline"])}
            for row in rows
            if not tag or tag in row["tags"]
        ),
        key=_order,
    )
    verdict = gate_verdict(version=version, policy=policy) if policy is not None else None
    return Panel(
        TEMPLATE,
        {
            "policy": policy,
            "run": run,
            "summary": run_summary_dict(run) if run is not None else None,
            "verdict": verdict,
            "rows": shown,
            "tags": tags,
            "tag": tag,
            "may_start": policy is not None
            and version.status in RUNNABLE_STATUSES
            and not (run is not None and run.status in (RunStatus.QUEUED, RunStatus.RUNNING))
            and access.may_start_eval_run(version.adapter),  # type: ignore[attr-defined]
            "may_override": verdict is not None
            and not verdict["passed"]
            and version.status == VersionStatus.VALIDATED
            and access.may_override_eval_gate(version, refused_by(version=version)),
            "newer_suite": newer_suite_version(policy) if policy is not None else None,
        },
    )


def queue_gate_notes(*, versions: list[AdapterVersion]) -> dict[int, str]:
    """The gate's state per version in the review queue, in two queries: the policies of their
    adapters and their latest runs. The verdict shown is the run's at its finish; the approval
    checks the gate again, against the policy as it is then."""
    policies = {
        p.adapter_id: p
        for p in EvalPolicy.objects.filter(adapter_id__in={v.adapter_id for v in versions})
    }
    latest: dict[int, EvalRun] = {}
    adapter_of = {v.pk: v.adapter_id for v in versions}
    for run in EvalRun.objects.filter(
        version__in=[v for v in versions if v.adapter_id in policies]
    ):
        if run.suite_version_id != policies[adapter_of[run.version_id]].suite_version_id:
            continue  # not on the suite version the gate holds: it never counts
        if run.version_id not in latest or run.number > latest[run.version_id].number:
            latest[run.version_id] = run
    notes = {}
    for version in versions:
        if version.adapter_id not in policies:
            continue
        last = latest.get(version.pk)
        if last is None:
            notes[version.pk] = "Eval gate: no run yet"
        elif last.status != RunStatus.FINISHED:
            notes[version.pk] = (
                f"Eval gate: run {last.number} {last.status} ({last.cases_done}/{last.cases_total})"
            )
        else:
            outcome = "passed" if last.verdict.get("passed") else "failed"
            notes[version.pk] = f"Eval gate: run {last.number} {outcome}"
    return notes


# --- the tenant's eval page: suites (upload) and each adapter's policy ---


def _evals_page(
    request: HttpRequest, access: Access, tenant: Any, error: ApplicationError | None = None
) -> HttpResponse:
    adapters = list(adapters_for(access=access, tenant=tenant))
    policies = {
        p.adapter_id: p
        for p in EvalPolicy.objects.filter(adapter__in=adapters).select_related(
            "suite_version__suite", "suite_version_set_by"
        )
    }
    return render_page(
        request,
        "evals/tenant_evals.html",
        {
            "tenant": tenant,
            "suites": suites_of(tenant=tenant),
            # The gate's forms only for those who may save them (owners): one rule, the
            # access rules', which the API and the service refuse on too.
            "rows": [
                {
                    "adapter": a,
                    "policy": policies.get(a.pk),
                    "may_set": access.may_change_eval_policy(a),
                }
                for a in adapters
            ],
            "may_upload": access.tenant_can(tenant, "manage_evals"),
            "limits": suite_limits(tenant),
        },
        error=error,
    )


@page_view
def tenant_evals(request: PortalRequest, tenant: str) -> HttpResponse:
    """GET: suites and policies; POST (multipart name, file): upload a suite version."""
    if request.method != "POST":
        access, found = tenant_scope(request, tenant)
        return _evals_page(request, access, found)
    access, found = tenant_scope(request, tenant, "manage_evals")
    upload = request.FILES.get("file")
    try:
        if upload is None:
            raise ApplicationError("suite.file_required", "Choose a JSON Lines file to upload.")
        version, created = suite_upload(
            access=access,
            tenant=found,
            name=post_text(request, "name", max_length=40),
            raw=upload.read(found.eval_max_suite_bytes + 1),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _evals_page(request, access, found, exc)
    word = "uploaded" if created else "already held these bytes"
    messages.success(request, f"Suite {version} {word} (sha256 {version.sha256[:12]}…).")
    return redirect("tenant-evals", tenant=found.slug)


def _rate(request: HttpRequest, name: str) -> float | None:
    raw = request.POST.get(name, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ApplicationError("eval_policy.bad_number", f"{name}: give a number.") from None


def _suite_choice(request: HttpRequest) -> tuple[str, int | None]:
    """The form's suite version ("qa@3"), or a suite by name alone."""
    chosen = post_text(request, "suite_version", max_length=60)
    if not chosen:
        return post_text(request, "suite", max_length=40), None
    name, _, number = chosen.rpartition("@")
    if not name or not number.isdigit() or len(number) > 9:
        raise ApplicationError("eval_policy.bad_suite_version", "Choose a suite version (name@N).")
    return name, int(number)


@page_view
@require_POST
def tenant_eval_policy(request: PortalRequest, tenant: str) -> HttpResponse:
    """POST {adapter, suite_version ("name@N", or suite: a name), min_pass_rate,
    max_regression_points, min_pairwise_win_or_tie, pairwise_ties_pass, judge, rubric}: set an
    adapter's policy (owners; policy_set checks)."""
    access, found = tenant_scope(request, tenant)
    adapter = adapter_get(access=access, tenant=found, name=post_text(request, "adapter"))
    try:
        suite, number = _suite_choice(request)
        policy_set(
            access=access,
            adapter=adapter,
            suite=suite,
            suite_version=number,
            min_pass_rate=_rate(request, "min_pass_rate"),
            max_regression_points=_rate(request, "max_regression_points"),
            min_pairwise_win_or_tie=_rate(request, "min_pairwise_win_or_tie"),
            pairwise_ties_pass=request.POST.get("pairwise_ties_pass") == "1",
            judge=post_text(request, "judge", max_length=120),
            rubric=post_text(request, "rubric"),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _evals_page(request, access, found, exc)
    messages.success(request, f"Eval policy of {adapter.name} saved.")
    return redirect("tenant-evals", tenant=found.slug)


@page_view
@require_POST
def version_eval_run_start(
    request: PortalRequest, tenant: str, adapter: str, number: int
) -> HttpResponse:
    """The version page's "Run the suite now" button (runner.run_request checks who may)."""
    access, found = tenant_scope(request, tenant)
    version = version_get(
        adapter=adapter_get(access=access, tenant=found, name=adapter), number=number
    )
    try:
        run, created = run_request(access=access, version=version)
    except ApplicationError as exc:
        if exc.status in (403, 404):
            raise
        messages.error(request, exc.message)
    else:
        word = "started" if created else "already under way"
        messages.success(request, f"Eval run {run.number} {word}.")
    return redirect("version-detail", tenant=found.slug, adapter=adapter, number=number)

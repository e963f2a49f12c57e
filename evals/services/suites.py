"""Uploading an eval suite: the whole file is checked before a row is written, so a refused file
leaves nothing behind; the same bytes again are the version that already holds them."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from core.audit import record_event
from core.errors import ApplicationError
from evals.models import EvalSuite, EvalSuiteVersion
from evals.scoring.suite_format import SuiteLimits, parse_suite
from tenants.access_port import Access
from tenants.models import SLUG_VALIDATOR, Tenant


def suite_limits(tenant: Tenant) -> SuiteLimits:
    return SuiteLimits(
        max_cases=tenant.eval_max_cases,
        max_bytes=tenant.eval_max_suite_bytes,
        max_case_tokens=tenant.eval_max_case_tokens,
    )


def suite_upload(
    *, access: Access, tenant: Tenant, name: str, raw: bytes, request_id: str = ""
) -> tuple[EvalSuiteVersion, bool]:
    """(the suite version holding `raw`, whether it is new). Refused whole, with every bad
    line's number and reason, when any line is bad."""
    access.require_tenant(tenant, "manage_evals")
    try:
        SLUG_VALIDATOR(name)
    except ValidationError:
        raise ApplicationError("suite.bad_name", f"Suite name: {SLUG_VALIDATOR.message}") from None
    parsed = parse_suite(raw, suite_limits(tenant))
    if not parsed.ok:
        first = parsed.errors[0]
        where = f"Line {first.line}: " if first.line else ""
        raise ApplicationError(
            "suite.invalid",
            f"{where}{first.message} Nothing of the file was kept.",
            errors=[e.as_dict() for e in parsed.errors],
        )
    try:
        with transaction.atomic():
            suite, _ = EvalSuite.objects.get_or_create(
                tenant=tenant, name=name, defaults={"created_by": access.user}
            )
            suite = EvalSuite.objects.select_for_update().get(pk=suite.pk)
            same = suite.versions.filter(sha256=parsed.sha256).first()
            if same is not None:
                return same, False
            latest = suite.versions.order_by("-number").values_list("number", flat=True).first()
            cases = [case.as_dict() for case in parsed.cases]
            version = EvalSuiteVersion.objects.create(
                tenant=tenant,
                suite=suite,
                number=(latest or 0) + 1,
                sha256=parsed.sha256,
                size_bytes=parsed.size_bytes,
                content=raw.decode("utf-8"),
                cases=cases,
                case_count=len(cases),
                must_pass_count=sum(1 for c in parsed.cases if c.must_pass),
                uploaded_by=access.user,
            )
            record_event(
                action="eval_suite.upload",
                actor=access.user,
                tenant=tenant,
                obj=version,
                object_id=f"{tenant.slug}/{name}@{version.number}",
                after={"sha256": version.sha256, "cases": version.case_count},
                request_id=request_id,
            )
    except IntegrityError:
        # Two uploads of one new suite at once: the other one made it; ask again.
        raise ApplicationError(
            "suite.busy", "Another upload of this suite is in progress; try again.", status=409
        ) from None
    return version, True

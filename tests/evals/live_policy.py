"""A policy with live checks only (release plans' guards), on an empty suite's first version:
the gate's suite is a pinned version (evals.models.EvalPolicy.suite_version)."""

from __future__ import annotations

from typing import Any

from evals.models import EvalPolicy, EvalSuite, EvalSuiteVersion


def live_checks_policy(*, tenant: Any, adapter: Any, checks: dict[str, Any]) -> EvalPolicy:
    suite = EvalSuite.objects.create(tenant=tenant, name="qa")
    version = EvalSuiteVersion.objects.create(
        tenant=tenant,
        suite=suite,
        number=1,
        sha256="0" * 64,
        size_bytes=0,
        content="",
        cases=[],
        case_count=0,
    )
    return EvalPolicy.objects.create(
        tenant=tenant, adapter=adapter, suite=suite, suite_version=version, live_checks=checks
    )

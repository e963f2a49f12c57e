"""The eval gate's reactions to the registry: thin; the work is in evals.services.runner."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from adapters.models import VersionStatus


def on_version_status_changed(sender: Any, *, version: Any, after: str, **_: Any) -> None:
    """A version just validated is evaluated at once when its adapter has a policy with a
    suite: the run starts after the status change commits."""
    if after != VersionStatus.VALIDATED:
        return
    transaction.on_commit(lambda: start_if_gated(version.pk))


def start_if_gated(version_id: int) -> None:
    from adapters.models import AdapterVersion
    from evals.selectors import policy_of
    from evals.services.runner import run_start

    version = (
        AdapterVersion.objects.select_related("adapter__tenant", "tenant")
        .filter(pk=version_id, status=VersionStatus.VALIDATED)
        .first()
    )
    if version is None or policy_of(version.adapter) is None:
        return
    run_start(version=version)

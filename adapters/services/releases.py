"""Releases through aliases: promote one version to 100%, roll an alias back to its previous
targets, and roll a failing canary back automatically.

The automatic rollback reads the gateway's per-minute measurements in Redis (gateway/recorder.py:
hashes `lp:gwm:min:<epoch minute>`, fields `tenant|adapter|version|what`) for the newest target of
every guarded canary, and decides with the pure `canary_verdict`, which knows nothing of Redis.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from django.db import transaction
from django.db.models import Count, QuerySet

from adapters.models import (
    AdapterVersion,
    Alias,
    AliasRevision,
    AliasRevisionAction,
    VersionStatus,
)
from adapters.services.aliases import (
    Resolved,
    apply_targets,
    current_revision,
    current_targets,
    describe,
    locked_alias,
    resolve_targets,
    revision_head,
    same_targets,
)
from core.audit import record_event
from core.errors import Conflict
from tenants.access_port import Access

log = logging.getLogger(__name__)
AUTO_ROLLBACK_ACTOR = "auto-rollback"


# --- promote and rollback ---------------------------------------------------------------------


def alias_promote(
    *,
    access: Access,
    alias: Alias,
    version: str,
    reason: str = "",
    request_id: str = "",
) -> Alias:
    """Send 100% of the alias to one active version of its tenant (`support@4`).

    At 100% a canary's own concurrency cap is dropped (the adapter's applies). Promoting the
    version that already has 100% and no cap changes nothing and records nothing: a retried
    promote is harmless.
    """
    access.require_tenant(alias.tenant, "manage_aliases")
    resolved = resolve_targets(alias.tenant, [{"version": version, "weight": 100}])
    with transaction.atomic():
        alias = locked_alias(alias)
        head = revision_head(alias)
        before = describe(current_targets(alias))
        if same_targets(before, describe(resolved)):
            return alias
        revision = apply_targets(
            alias=alias,
            targets=resolved,
            head=head,
            parent=head,
            action=AliasRevisionAction.PROMOTE,
            actor=access.user,
            reason=reason,
        )
        record_event(
            action="alias.promote",
            actor=access.user,
            tenant=alias.tenant,
            obj=alias,
            object_id=f"{alias.tenant.slug}/{alias.name}",
            before={"targets": before, "revision": head.number if head else None},
            after={"targets": revision.targets, "revision": revision.number, "reason": reason},
            request_id=request_id,
        )
    return alias


def alias_rollback(
    *,
    access: Access,
    alias: Alias,
    reason: str = "",
    request_id: str = "",
) -> Alias:
    """Return the alias to the targets it had before its current revision, in one call."""
    access.require_tenant(alias.tenant, "manage_aliases")
    with transaction.atomic():
        alias = locked_alias(alias)
        _rollback_locked(
            alias=alias,
            head=revision_head(alias),
            actor=access.user,
            action=AliasRevisionAction.ROLLBACK,
            reason=reason,
            request_id=request_id,
        )
    return alias


def _previous_targets(alias: Alias, parent: AliasRevision) -> list[Resolved]:
    """The parent revision's targets, refused if any of them can no longer serve."""
    ids = [t["version_id"] for t in parent.targets]
    versions = AdapterVersion.objects.select_related("adapter").in_bulk(ids)
    resolved: list[Resolved] = []
    for target in parent.targets:
        version = versions.get(target["version_id"])
        if version is None or version.tenant_id != alias.tenant_id:
            raise Conflict(
                "alias.rollback_version_gone",
                f"Revision {parent.number} points at '{target['version']}', which no longer "
                "exists; set the alias's targets instead.",
            )
        if version.status != VersionStatus.ACTIVE:
            raise Conflict(
                "alias.rollback_version_not_active",
                f"Revision {parent.number} points at '{target['version']}', which is "
                f"'{version.status}' now; set the alias's targets instead.",
            )
        resolved.append((version, target["weight"], target["max_concurrent"]))
    return resolved


def _rollback_locked(
    *,
    alias: Alias,
    head: AliasRevision | None,
    actor: Any,
    action: str,
    reason: str,
    evidence: dict[str, Any] | None = None,
    request_id: str = "",
) -> AliasRevision:
    parent = head.parent if head else None
    if head is None or parent is None:
        raise Conflict(
            "alias.no_previous_revision",
            f"Alias '{alias.name}' has no previous targets to roll back to.",
        )
    previous = _previous_targets(alias, parent)
    before = describe(current_targets(alias))
    revision = apply_targets(
        alias=alias,
        targets=previous,
        head=head,
        # Rolling back again goes to what came before the restored state, never back to
        # the state just rolled back.
        parent=parent.parent,
        action=action,
        actor=actor,
        reason=reason,
        evidence=evidence,
    )
    record_event(
        action="alias.auto_rollback"
        if action == AliasRevisionAction.AUTO_ROLLBACK
        else "alias.rollback",
        actor=actor,
        tenant=alias.tenant,
        obj=alias,
        object_id=f"{alias.tenant.slug}/{alias.name}",
        before={"targets": before, "revision": head.number},
        after={
            "targets": revision.targets,
            "revision": revision.number,
            "restored_revision": parent.number,
            "reason": reason,
            **({"evidence": evidence} if evidence else {}),
        },
        request_id=request_id,
    )
    return revision


def alias_release_weights(
    *,
    alias: Alias,
    stable: AdapterVersion,
    candidate: AdapterVersion,
    weight: int,
    sample_share: float,
    actor: Any,
    reason: str,
    evidence: dict[str, Any] | None = None,
) -> AliasRevision | None:
    """A release plan's step (evals.services.release_plans): the candidate at `weight` % and the
    stable at the rest (weight 0: the stable alone; 100: the candidate alone), and the share of
    live answers the gateway samples for the plan (0 once it ends). The caller decided who may
    (a person's access, or the controller's claim) and runs this inside its transaction; the
    new state is the alias's next revision, so the gateway's tables are re-read as for any
    change. None when the targets were already these (only the share is set then)."""
    if not 0 <= weight <= 100:
        raise Conflict(
            "release.bad_weight", f"A step's weight must lie within 0-100, not {weight}."
        )
    alias = locked_alias(alias)
    targets: list[Resolved] = []
    if weight < 100:
        targets.append((stable, 100 - weight, None))
    if weight > 0:
        targets.append((candidate, weight, None))
    for version, _, _ in targets:
        if version.status != VersionStatus.ACTIVE:
            raise Conflict(
                "release.version_not_active",
                f"'{version.adapter.name}@{version.number}' is '{version.status}'; a release "
                "moves weights between active versions only.",
            )
    if alias.live_sample_share != sample_share:
        alias.live_sample_share = sample_share
        alias.save(update_fields=["live_sample_share", "updated_at"])
    head = revision_head(alias)
    before = describe(current_targets(alias))
    if same_targets(before, describe(targets)):
        return None
    revision = apply_targets(
        alias=alias,
        targets=targets,
        head=head,
        parent=head,
        action=AliasRevisionAction.SET,
        actor=actor,
        reason=reason,
        evidence=evidence,
    )
    record_event(
        action="alias.release_step",
        actor=actor,
        tenant=alias.tenant,
        obj=alias,
        object_id=f"{alias.tenant.slug}/{alias.name}",
        before={"targets": before, "revision": head.number if head else None},
        after={
            "targets": revision.targets,
            "revision": revision.number,
            "reason": reason,
            **({"evidence": evidence} if evidence else {}),
        },
    )
    return revision


# --- the canary verdict (pure) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Guard:
    max_error_rate: float
    max_ttft_ms: float | None
    min_requests: int
    window_minutes: int

    @classmethod
    def of(cls, alias: Alias) -> Guard:
        return cls(
            max_error_rate=alias.max_error_rate,
            max_ttft_ms=alias.max_ttft_ms,
            min_requests=alias.min_requests,
            window_minutes=alias.window_minutes,
        )


@dataclass(frozen=True, slots=True)
class MinuteStats:
    """One minute of one version's requests, as the gateway's recorder counted them."""

    minute: int
    requests: int = 0
    errors: int = 0
    ttft_ms_sum: float = 0.0
    ttft_count: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    rollback: bool
    reason: str
    requests: int
    errors: int
    error_rate: float | None
    mean_ttft_ms: float | None

    def evidence(self, guard: Guard) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "error_rate": None if self.error_rate is None else round(self.error_rate, 4),
            "mean_ttft_ms": None if self.mean_ttft_ms is None else round(self.mean_ttft_ms, 1),
            "max_error_rate": guard.max_error_rate,
            "max_ttft_ms": guard.max_ttft_ms,
            "min_requests": guard.min_requests,
            "window_minutes": guard.window_minutes,
            "reason": self.reason,
        }


def canary_verdict(series: Sequence[MinuteStats], guard: Guard) -> Verdict:
    """Roll back when, over the minutes given, the canary served at least `min_requests` and
    its error rate is above `max_error_rate` or its mean TTFT above `max_ttft_ms`."""
    requests = sum(m.requests for m in series)
    errors = sum(m.errors for m in series)
    ttft_count = sum(m.ttft_count for m in series)
    error_rate = errors / requests if requests else None
    mean_ttft = sum(m.ttft_ms_sum for m in series) / ttft_count if ttft_count else None

    def verdict(rollback: bool, reason: str) -> Verdict:
        return Verdict(rollback, reason, requests, errors, error_rate, mean_ttft)

    if requests < guard.min_requests:
        return verdict(False, f"{requests} requests, fewer than {guard.min_requests}")
    if error_rate is not None and error_rate > guard.max_error_rate:
        return verdict(
            True,
            f"error rate {error_rate:.1%} over {guard.max_error_rate:.1%} "
            f"({errors} of {requests} requests)",
        )
    if guard.max_ttft_ms is not None and mean_ttft is not None and mean_ttft > guard.max_ttft_ms:
        return verdict(
            True,
            f"mean TTFT {mean_ttft:.0f} ms over {guard.max_ttft_ms:g} ms ({ttft_count} replies)",
        )
    return verdict(False, "within limits")


# --- reading the series and acting on the verdict ---------------------------------------------


def window_minutes(*, now: float, window: int, since: float) -> range:
    """The epoch minutes to judge: the last `window` minutes, but only whole minutes after the
    revision started, so nothing measured under the previous targets counts against this one."""
    last = int(now // 60)
    first = max(last - window + 1, int(since // 60) + 1)
    return range(first, last + 1)


def canary_series(
    client: redis.Redis, *, tenant: str, adapter: str, version: str, minutes: range
) -> list[MinuteStats]:
    prefix = f"{tenant}|{adapter}|{version}|"
    fields = [prefix + what for what in ("requests", "errors", "ttft_ms_sum", "ttft_count")]
    pipe = client.pipeline(transaction=False)
    for minute in minutes:
        pipe.hmget(f"lp:gwm:min:{minute}", fields)
    series = []
    for minute, values in zip(minutes, pipe.execute() if minutes else [], strict=True):
        requests, errors, ttft_sum, ttft_count = (v or b"0" for v in values)
        series.append(
            MinuteStats(
                minute=minute,
                requests=int(requests),
                errors=int(errors),
                ttft_ms_sum=float(ttft_sum),
                ttft_count=int(ttft_count),
            )
        )
    return series


@dataclass(frozen=True, slots=True)
class CanaryCheck:
    alias: str  # tenant/alias
    canary: str  # adapter@N
    revision: int
    verdict: Verdict | None
    outcome: str  # "kept", "rolled_back", "waiting" (no whole minute yet) or a refusal's code


def check_canaries(*, client: redis.Redis, now: float | None = None) -> list[CanaryCheck]:
    """One pass over every guarded alias with a canary; rolls back the failing ones."""
    now = time.time() if now is None else now
    guarded = (
        # An alias under a release plan (a live-sample share set) is judged by the plan's
        # controller, where this same check is one guard among others (docs/releases.md).
        Alias.objects.filter(auto_rollback=True, live_sample_share=0)
        .annotate(n_targets=Count("targets"))
        .filter(n_targets__gt=1)
        .select_related("tenant")
        .order_by("pk")
    )
    return [_check_one(alias, client=client, now=now) for alias in guarded]


def _check_one(alias: Alias, *, client: redis.Redis, now: float) -> CanaryCheck:
    name = f"{alias.tenant.slug}/{alias.name}"
    head = current_revision(alias)
    targets = current_targets(alias)
    canary = max(targets, key=lambda t: t[0].pk)[0]  # the newest version is the canary
    label = f"{canary.adapter.name}@{canary.number}"
    if head is None:
        return CanaryCheck(name, label, 0, None, "alias.no_previous_revision")
    guard = Guard.of(alias)
    minutes = window_minutes(
        now=now, window=guard.window_minutes, since=head.created_at.timestamp()
    )
    if not minutes:
        return CanaryCheck(name, label, head.number, None, "waiting")
    series = canary_series(
        client,
        tenant=alias.tenant.slug,
        adapter=canary.adapter.name,
        version=label,
        minutes=minutes,
    )
    verdict = canary_verdict(series, guard)
    if not verdict.rollback:
        return CanaryCheck(name, label, head.number, verdict, "kept")
    evidence = {
        "canary": label,
        "revision": head.number,
        "minutes": [minutes.start, minutes.stop - 1],
        **verdict.evidence(guard),
    }
    try:
        rolled = _auto_rollback(alias, expected=head, reason=verdict.reason, evidence=evidence)
    except Conflict as exc:
        log.warning("auto-rollback of %s refused: %s", name, exc.message)
        return CanaryCheck(name, label, head.number, verdict, exc.code)
    return CanaryCheck(name, label, head.number, verdict, "rolled_back" if rolled else "kept")


def _auto_rollback(
    alias: Alias, *, expected: AliasRevision, reason: str, evidence: dict[str, Any]
) -> bool:
    """Roll back once per revision: if the alias moved on since it was judged, do nothing."""
    with transaction.atomic():
        alias = locked_alias(alias)
        head = revision_head(alias)
        if head is None or head.pk != expected.pk:
            return False
        _rollback_locked(
            alias=alias,
            head=head,
            actor=AUTO_ROLLBACK_ACTOR,
            action=AliasRevisionAction.AUTO_ROLLBACK,
            reason=f"automatic: {reason}",
            evidence=evidence,
        )
    return True


def revisions_of(*, alias: Alias) -> QuerySet[AliasRevision]:
    """The alias's revisions, newest first (a read; the API's revisions list)."""
    return alias.revisions.select_related("parent").order_by("-number")

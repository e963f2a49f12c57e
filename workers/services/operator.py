"""What operators ask of one engine for one version (pin, unpin, warm, evict), checked against
the hard rules before anything is written, audited, then carried out by the controller.

The rules are checked on the portal's belief (desired and observed rows, the gateway's counts);
the controller checks them again on the engine's own report before acting, and the plugin a
third time, so a stale belief can delay an action but never break an engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from adapters.models import AdapterVersion
from core.errors import ApplicationError, Conflict
from workers import shared_state
from workers.cache_policy.rules import HardRules
from workers.desired import set_desired
from workers.models import Engine, Residency, ResidencyState
from workers.selectors import LOADABLE_ENGINE_STATES, holdable

KEPT = (ResidencyState.RESIDENT_GPU, ResidencyState.PINNED)


@dataclass(frozen=True)
class Problem:
    code: str
    message: str


def engine_pin_capacity(engine: Engine, rules: HardRules | None = None) -> int:
    """Pins one engine may hold: one GPU slot and one cache slot always stay unpinned."""
    r = rules or HardRules()
    return max(
        0, min(engine.max_loras - r.min_unpinned_gpu, engine.max_cpu_loras - r.min_unpinned_cpu)
    )


def _servable_problems(engine: Engine, version: AdapterVersion) -> list[Problem]:
    out = []
    if not holdable(version):
        out.append(
            Problem(
                "fleet.not_servable", f"{version} is {version.status}: engines may not hold it."
            )
        )
    if engine.state not in LOADABLE_ENGINE_STATES:
        out.append(
            Problem(
                "fleet.engine_not_loading",
                f"Engine '{engine.name}' is {engine.state}: it takes no new adapters.",
            )
        )
    if (version.rank or 0) > engine.max_lora_rank:
        out.append(
            Problem(
                "fleet.rank_too_large",
                f"{version} has rank {version.rank}; engine '{engine.name}' allows {engine.max_lora_rank}.",
            )
        )
    if version.adapter.base_model_id != engine.base_model_id:
        out.append(
            Problem(
                "fleet.wrong_base_model",
                f"{version} is not for engine '{engine.name}''s base model.",
            )
        )
    return out


def pin_problems(engine: Engine, version: AdapterVersion) -> list[Problem]:
    out = _servable_problems(engine, version)
    rows = (
        Residency.objects.filter(engine=engine, desired_state=ResidencyState.PINNED)
        .exclude(version=version)
        .select_related("version")
    )
    capacity = engine_pin_capacity(engine)
    if rows.count() + 1 > capacity:
        out.append(
            Problem(
                "fleet.pin_budget",
                f"Engine '{engine.name}' may hold {capacity} pin(s) (one GPU slot and one cache slot "
                f"stay unpinned, or vLLM's engine dies); unpin one first.",
            )
        )
    tenant = version.tenant
    mine = sum(1 for r in rows if r.version.tenant_id == tenant.pk)
    if mine + 1 > tenant.quota_pinned_slots:
        out.append(
            Problem(
                "fleet.pin_quota",
                f"Tenant '{tenant.slug}' may pin {tenant.quota_pinned_slots} version(s) per engine.",
            )
        )
    return out


def warm_problems(engine: Engine, version: AdapterVersion) -> list[Problem]:
    out = _servable_problems(engine, version)
    kept = (
        Residency.objects.filter(engine=engine, desired_state__in=KEPT)
        .exclude(version=version)
        .count()
    )
    if kept + 1 > engine.max_cpu_loras - HardRules().min_unpinned_cpu:
        out.append(
            Problem(
                "fleet.last_free_slot",
                f"Keeping {kept + 1} version(s) on '{engine.name}' would leave no free cache slot "
                f"(max_cpu_loras={engine.max_cpu_loras}).",
            )
        )
    return out


def evict_problems(engine: Engine, version: AdapterVersion) -> list[Problem]:
    out = []
    row = Residency.objects.filter(engine=engine, version=version).first()
    if row is not None and row.desired_state == ResidencyState.PINNED:
        out.append(
            Problem("fleet.pinned", f"{version} is pinned on '{engine.name}': unpin it first.")
        )
    in_flight = shared_state.inflight_counts(engine.name).get(version.served_name, 0)
    if in_flight:
        out.append(
            Problem(
                "fleet.in_flight",
                f"{version} has {in_flight} request(s) in flight on '{engine.name}'.",
            )
        )
    return out


def _refuse(problems: list[Problem]) -> None:
    if problems:
        first = problems[0]
        raise Conflict(first.code, first.message, problems=[p.__dict__ for p in problems])


def operator_act(
    *, access: Any, engine: Engine, version: AdapterVersion, verb: str, request_id: str = ""
) -> Residency:
    """pin / unpin / warm / evict one version on one engine; audited; refused with every reason.
    Operators and platform admins (asked here, adapters/access.py)."""
    access.require_platform_role("is_operator")
    actor = access.user
    with transaction.atomic():
        engine = Engine.objects.select_for_update().get(pk=engine.pk)
        row = Residency.objects.filter(engine=engine, version=version).first()
        if verb == "pin":
            _refuse(pin_problems(engine, version))
            state = ResidencyState.PINNED
        elif verb == "warm":
            _refuse(warm_problems(engine, version))
            state = ResidencyState.RESIDENT_GPU
        elif verb == "unpin":
            if row is None or row.desired_state != ResidencyState.PINNED:
                raise Conflict("fleet.not_pinned", f"{version} is not pinned on '{engine.name}'.")
            state = ResidencyState.REGISTERED
        elif verb == "evict":
            _refuse(evict_problems(engine, version))
            if row is None or (
                row.desired_state == ResidencyState.ABSENT
                and row.observed_state == ResidencyState.ABSENT
            ):
                raise Conflict("fleet.not_resident", f"{version} is not on '{engine.name}'.")
            state = ResidencyState.ABSENT
        else:
            raise ApplicationError("fleet.bad_verb", f"Unknown action '{verb}'.")
        return set_desired(
            version=version,
            engine=engine,
            state=state,
            reason=f"operator {verb}",
            actor=actor,
            request_id=request_id,
            audit_action=f"engine.{verb}",
        )

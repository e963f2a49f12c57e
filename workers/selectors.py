"""Reads for the fleet: pools, which engines may hold a version, what is where, engine clients."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypedDict

from django.conf import settings
from django.db.models import Min, Q, QuerySet, Sum

from adapters.models import AdapterVersion, VersionStatus
from adapters.selectors import pool_of
from core.errors import Conflict, NotFound
from workers.models import Engine, EngineState, Residency, ResidencyState
from workers.vllm_client import EngineError, VLLMClient

if TYPE_CHECKING:
    from workers.advisor import Advice

# States of a version that engines may hold: active is served; staged may be tried out by its
# tenant's maintainers (playground) before release.
HOLDABLE_STATUSES = (VersionStatus.ACTIVE, VersionStatus.STAGED)
# A validated version whose files an eval run promoted to the serving store may be held too, for
# that run only (holdable): the gateway's tables carry active versions alone, so /v1/ never
# reaches it; approval promotes the same files again, idempotently, and moves it to staged.
# Engine states in which the controller loads adapters, and in which the gateway sends traffic.
LOADABLE_ENGINE_STATES = (EngineState.UP, EngineState.WARMING)
TRAFFIC_ENGINE_STATES = (EngineState.UP,)
WANTED_STATES = (ResidencyState.REGISTERED, ResidencyState.RESIDENT_GPU, ResidencyState.PINNED)


VERSION_LABEL = re.compile(r"^(?P<tenant>[a-z0-9-]+)/(?P<adapter>[a-z0-9-]+)@(?P<number>[0-9]+)$")


def version_from_label(label: object) -> AdapterVersion:
    """`tenant/adapter@N` -> the version (operators act across tenants; API and pages)."""
    match = VERSION_LABEL.match(label) if isinstance(label, str) else None
    if match is None:
        raise Conflict("fleet.bad_version", "Name the version as 'tenant/adapter@N'.")
    version = (
        AdapterVersion.objects.select_related("adapter__tenant", "tenant")
        .filter(
            tenant__slug=match["tenant"],
            adapter__name=match["adapter"],
            number=int(match["number"]),
        )
        .first()
    )
    if version is None:
        raise NotFound("version.not_found", f"No version '{label}'.")
    return version


def engine_get(name: str) -> Engine:
    engine = Engine.objects.select_related("base_model").filter(name=name).first()
    if engine is None:
        raise NotFound("engine.not_found", f"No engine '{name}'.")
    return engine


def engine_key(engine: Engine) -> str | None:
    """The engine's own key (PORTAL_ENGINE_KEYS): an engine's key goes only to that engine.

    The shared PORTAL_ENGINE_KEY is a development convenience (one local engine): honoured only
    with DEBUG on. Outside debug it would hand every engine's host the key to all the others.
    """
    own = settings.PORTAL_ENGINE_KEYS.get(engine.name)
    if own:
        return own
    return (settings.PORTAL_ENGINE_KEY or None) if settings.DEBUG else None


def engine_key_refusal(engine: Engine) -> str:
    """Why the portal must not talk to this engine at all, or ''.

    Outside debug every engine runs with its key (vLLM's --api-key and the plugin's guard); an
    engine the portal has no key for is misconfigured, and calling it without one would only
    work if the engine were open to anyone. The prober marks it down with this reason, so the
    controller and the gateway leave it alone.
    """
    if settings.DEBUG or engine_key(engine):
        return ""
    return (
        f"engine.key_missing: no key for engine '{engine.name}' in PORTAL_ENGINE_KEYS; give it "
        "its own key there and start the engine with the same key (PORTAL_ENGINE_KEY and "
        "VLLM_API_KEY on the engine, as engine/launcher.py does)."
    )


def engine_client(engine: Engine, *, timeout: float | None = None) -> VLLMClient:
    refusal = engine_key_refusal(engine)
    if refusal:
        # Not permanent: the adapter is fine, the engine's configuration is not.
        raise EngineError(refusal, permanent=False)
    return VLLMClient(
        engine.url,
        timeout=settings.ENGINE_HTTP_TIMEOUT if timeout is None else timeout,
        engine_key=engine_key(engine),
        allow_plaintext_key=settings.ENGINE_ALLOW_PLAINTEXT_KEY,
    )


def engines_in_pool_for(version: AdapterVersion) -> QuerySet[Engine]:
    """Engines of the version's pool and base model whose rank limit admits it (any state)."""
    adapter = version.adapter
    return Engine.objects.filter(
        pool=pool_of(adapter),
        base_model_id=adapter.base_model_id,
        max_lora_rank__gte=version.rank or 0,
    ).order_by("name")


def engines_for_version(version: AdapterVersion, *, for_traffic: bool = False) -> list[Engine]:
    """Engines that may load this version now (or take its traffic, with `for_traffic`)."""
    states = TRAFFIC_ENGINE_STATES if for_traffic else LOADABLE_ENGINE_STATES
    return list(engines_in_pool_for(version).filter(state__in=states))


def holdable(version: AdapterVersion) -> bool:
    if version.status == VersionStatus.VALIDATED:
        return bool(version.serving_keys)  # promoted for an eval run
    return version.status in HOLDABLE_STATUSES


def residencies_of_engine(engine: Engine) -> QuerySet[Residency]:
    return Residency.objects.filter(engine=engine).select_related(
        "version__adapter__tenant", "version__tenant"
    )


def wanted_residencies(engine: Engine) -> QuerySet[Residency]:
    """Rows the controller keeps on the engine: desired present, and the version holdable."""
    return residencies_of_engine(engine).filter(
        Q(version__status__in=HOLDABLE_STATUSES)
        | (Q(version__status=VersionStatus.VALIDATED) & ~Q(version__serving_keys={})),
        desired_state__in=WANTED_STATES,
    )


def tier_of(residency: Residency) -> str:
    """hot (GPU slot, pinned or not), warm (engine CPU cache or staged on the node's disk),
    cold (object store only), or disabled (not servable)."""
    if not holdable(residency.version):
        return "disabled"
    if residency.observed_state in (ResidencyState.RESIDENT_GPU, ResidencyState.PINNED):
        return "hot"
    if residency.observed_state in (ResidencyState.RESIDENT_CPU, ResidencyState.REGISTERED):
        return "warm"
    if residency.staged_at is not None and residency.quarantined_at is None:
        return "warm"
    return "cold"


def max_rank_for(version: AdapterVersion) -> int:
    """The smallest max_lora_rank among engines that could serve it: an adapter that fits only
    some engines would fail to load on the others."""
    engines = Engine.objects.filter(base_model=version.adapter.base_model)
    pool = version.adapter.pool or version.tenant.pool
    if pool:
        engines = engines.filter(pool=pool)
    return engines.aggregate(rank=Min("max_lora_rank"))["rank"] or settings.DEFAULT_MAX_LORA_RANK


def version_placement(version: AdapterVersion) -> list[dict[str, object]]:
    """Where this version is, engine by engine (the API's "where is this version resident")."""
    rows = {
        r.engine_id: r
        for r in Residency.objects.filter(version=version).select_related("engine", "version")
    }
    out: list[dict[str, object]] = []
    for engine in engines_in_pool_for(version):
        row = rows.pop(engine.pk, None)
        out.append(placement_row(engine, version, row))
    for row in rows.values():  # engines outside the pool that still hold it (being converged)
        out.append(placement_row(row.engine, version, row))
    return out


def placement_row(
    engine: Engine, version: AdapterVersion, row: Residency | None
) -> dict[str, object]:
    if row is None:
        tier = "cold" if holdable(version) else "disabled"
        return {
            "engine": engine.name,
            "tier": tier,
            "desired_state": "absent",
            "observed_state": "absent",
            "staged": False,
            "quarantined": False,
        }
    return {
        "engine": engine.name,
        "tier": tier_of(row),
        "desired_state": row.desired_state,
        "observed_state": row.observed_state,
        "staged": row.staged_at is not None,
        "quarantined": row.quarantined_at is not None,
        "load_latency_ms": row.load_latency_ms,
        "loaded_at": row.loaded_at,
    }


class EngineAdvice(TypedDict):
    engine: str
    current: dict[str, int]  # the engine's flags now
    advised: dict[str, int]
    changed: bool
    reasons: list[str]


def _advice(engine: Engine, window_s: int = 3600) -> Advice:
    import time

    from workers import shared_state
    from workers.advisor import advise
    from workers.advisor_selectors import advisor_inputs_for

    busy = shared_state.busy_intervals(engine.name, since=time.time() - window_s)
    return advise(advisor_inputs_for(engine, window_s=window_s, inflight=busy))


def engine_advice(engine: Engine) -> EngineAdvice:
    """The advisor's output for one engine, from its residency, actions and busy samples."""
    advice = _advice(engine)
    return {
        "engine": engine.name,
        "current": advice.current,
        "advised": advice.flags,
        "changed": advice.changed,
        "reasons": advice.reasons,
    }


def engine_launch_config(engine: Engine) -> dict[str, object]:
    from workers.advisor import launch_flags
    from workers.advisor_selectors import lora_modules

    advice = _advice(engine)  # the same advice as engine_advice: the two never disagree
    modules = lora_modules(engine)
    return {
        "engine": engine.name,
        "flags": launch_flags(engine, advice, modules=modules),
        "lora_modules": modules,
    }


def pool_cache_slots(pool: str) -> int:
    """The engine cache slots of a pool's engines together (--max-cpu-loras each): the size
    of the LRU that gold protection compares with (workers.engine_view.pool_policy)."""
    total = Engine.objects.filter(pool=pool).aggregate(slots=Sum("max_cpu_loras"))["slots"]
    return int(total or 0)

"""Reads for the flag advisor: its inputs from an engine's Residency and FleetAction rows, and the
`--lora-modules` entries of the versions desired on an engine."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from workers.advisor import (
    DEFAULT_CPU_LORAS_CAP,
    DEFAULT_RELOAD_WINDOW_S,
    AdvisorInputs,
    count_reloaded_soon_after,
    lora_module_entry,
    max_distinct_within,
)
from workers.models import Engine, FleetAction, FleetActionKind, Residency, ResidencyState

# Actions that take a version out of the engine cache, and ones that mean it was used (wanted).
EVICTING = (FleetActionKind.EVICT, FleetActionKind.UNLOAD)
USING = (FleetActionKind.LOAD, FleetActionKind.WARM, FleetActionKind.PIN)


def _desired(engine: Engine) -> Q:
    """Versions the engine should serve (what a relaunch registers); ones on their way out are not."""
    return Q(engine=engine) & ~Q(desired_state=ResidencyState.ABSENT)


def advisor_inputs_for(
    engine: Engine,
    *,
    window_s: int = 3600,
    reload_window_s: float = DEFAULT_RELOAD_WINDOW_S,
    inflight: Sequence[tuple[float, int]] = (),
    cpu_loras_cap: int = DEFAULT_CPU_LORAS_CAP,
    now: datetime | None = None,
) -> AdvisorInputs:
    """Two queries: the desired residencies, and the window's successful fleet actions.

    `inflight` is the caller's record of (seconds, distinct adapters running) from the engine's
    `vllm:lora_requests_info`; no table keeps it, so without it max_loras is "too little traffic".
    Used versions = loaded, warmed or pinned in the window, or last hit in it (Residency.last_used_at).
    """
    now = now or timezone.now()
    since = now - timedelta(seconds=window_s)
    residencies = list(
        Residency.objects.filter(_desired(engine)).values_list(
            "version__rank", "desired_state", "last_used_at", "version__served_name"
        )
    )
    actions = list(
        FleetAction.objects.filter(
            engine=engine,
            ok=True,
            kind__in=(*EVICTING, *USING),
            created_at__gte=since,
            created_at__lte=now,
        )
        .order_by("created_at", "id")
        .values_list("created_at", "kind", "served_name")
    )
    evictions, reloaded = count_reloaded_soon_after(
        (
            (at, "evict" if kind in EVICTING else "load", name)
            for at, kind, name in actions
            if kind in EVICTING or kind == FleetActionKind.LOAD
        ),
        reload_window_s=reload_window_s,
    )
    uses = [(at, name) for at, kind, name in actions if kind in USING]
    uses += [(at, name) for _, _, at, name in residencies if at is not None and since <= at <= now]
    return AdvisorInputs(
        engine=engine.name,
        current_max_loras=engine.max_loras,
        current_max_cpu_loras=engine.max_cpu_loras,
        current_max_lora_rank=engine.max_lora_rank,
        served_ranks=tuple(rank for rank, *_ in residencies),
        pinned=sum(1 for _, desired, *_ in residencies if desired == ResidencyState.PINNED),
        inflight=tuple(inflight),
        window_s=float(window_s),
        evictions=evictions,
        reloaded_soon_after=reloaded,
        max_distinct_in_reload_window=max_distinct_within(uses, width_s=reload_window_s),
        reload_window_s=float(reload_window_s),
        cpu_loras_cap=cpu_loras_cap,
    )


def lora_modules(engine: Engine) -> list[dict[str, str]]:
    """`--lora-modules` entries (vLLM 0.32) for every version desired on the engine, so a restarted
    engine comes back with them registered; paths are the node's staging paths, never input."""
    names = (
        Residency.objects.filter(_desired(engine))
        .order_by("version__served_name")
        .values_list("version__served_name", flat=True)
    )
    return [
        lora_module_entry(
            served_name=name,
            adapter_root=engine.adapter_root,
            base_model_name=engine.served_model_name,
        )
        for name in names
    ]

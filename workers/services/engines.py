"""Writes for the fleet: the observed state of engines."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.audit import record_event
from workers import selectors
from workers.models import Engine, EngineState
from workers.vllm_client import EngineError, VLLMClient


async def probe_engine(url: str, engine_key: str | None = None) -> str:
    """'' when the engine answers its health route, else the reason."""
    client = VLLMClient(
        url,
        timeout=settings.HEALTHZ_ENGINE_TIMEOUT,
        engine_key=engine_key,
        allow_plaintext_key=settings.ENGINE_ALLOW_PLAINTEXT_KEY,
    )
    try:
        await client.health()
        return ""
    except EngineError as exc:
        return str(exc)
    finally:
        await client.aclose()


# The capabilities' entry that is no field of the engine: the names the plugin says it holds
# (engine_record_probe decides with it whether an engine back from down is up at once).
HOLDS = "holds"


async def probe_capabilities(url: str, engine_key: str | None = None) -> dict[str, Any] | None:
    """Whether the portal plugin answers (and sees GPU slots), the engine's context length
    (`max_model_len`, when its /v1/models says), and what the plugin says it holds (HOLDS);
    None when it cannot be told."""
    client = VLLMClient(
        url,
        timeout=settings.HEALTHZ_ENGINE_TIMEOUT,
        engine_key=engine_key,
        allow_plaintext_key=settings.ENGINE_ALLOW_PLAINTEXT_KEY,
    )
    try:
        try:
            report = await client.residency()
            found: dict[str, Any] = {
                "has_plugin": True,
                "gpu_observed": bool(report.get("gpu_observed")),
                HOLDS: set(report.get("resident", [])),
            }
        except EngineError as exc:
            if exc.status != 404:
                return None
            found = {"has_plugin": False, "gpu_observed": False}  # a stock vLLM: no /portal/
        try:
            cards = await client.list_models()
        except EngineError:
            return found
        context = cards[0].get("max_model_len") if cards else None
        if isinstance(context, int) and context > 0:
            found["max_model_len"] = context
        return found
    finally:
        await client.aclose()


# Routes an engine must refuse to a caller without its key: vLLM's own --api-key covers the
# first, only the plugin's guard (or a proxy that checks the key) the second, the runtime LoRA
# load that vLLM's --api-key leaves open (engine/plugin/portal_engine_plugin/guard.py).
GUARDED_PROBES = ("/v1/models", "/adapters")


async def probe_guard(url: str) -> str:
    """'' when the engine answers 401/403 on GUARDED_PROBES without a key, else why not.

    Sends no key at all, so nothing leaks to a host that is not what it claims to be.
    """
    async with httpx.AsyncClient(
        base_url=url.rstrip("/"), timeout=settings.HEALTHZ_ENGINE_TIMEOUT
    ) as client:
        for path in GUARDED_PROBES:
            try:
                response = await client.get(path)
            except httpx.HTTPError as exc:
                return f"engine.unreachable: GET {path}: {exc!r}"[:500]
            if response.status_code not in (401, 403):
                return (
                    f"engine.unguarded: GET {path} without the engine key answered "
                    f"{response.status_code}, not 401. Start the engine with its key "
                    "(PORTAL_ENGINE_KEY for the plugin's guard, VLLM_API_KEY for vLLM's "
                    "--api-key), as engine/launcher.py does; a stock vLLM needs a proxy that "
                    "checks the key on every route."
                )
    return ""


# The engine's own count of tokens it has processed: it moves with every step the engine core
# takes, and stands still while the core makes no progress.
PROGRESS_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def tokens_processed(metrics_text: str) -> float | None:
    """The sum of PROGRESS_COUNTERS in a /metrics page; None when it has neither."""
    from prometheus_client.parser import text_string_to_metric_families

    found = [
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name in PROGRESS_COUNTERS
    ]
    return sum(found) if found else None


def stall_verdict(before: float | None, after: float | None, waited_s: float) -> str:
    """For a one-token request that did not finish within `waited_s`: '' unless the engine is
    stuck, its token counters unmoved meanwhile (a busy engine's move: it is slow, not stuck,
    and keeps its traffic). No counters to read count as no movement."""
    if before is not None and after is not None and after > before:
        return ""
    return (
        f"engine.stalled: a one-token request did not finish in {waited_s:g} s and the engine "
        "processed no token meanwhile (its API server answers /health, its engine core makes "
        "no progress)"
    )


async def probe_progress(url: str, engine_key: str | None, model: str) -> str:
    """'' when the engine still works: a one-token request finishes within
    ENGINE_PROGRESS_TIMEOUT_SECONDS, or the engine is visibly busy; else why not.

    vLLM's /health answers from its API server, which keeps answering (and accepting requests
    with 200) while the engine core makes no progress: in bench-load a worker stalled for
    minutes and every request sent there waited out its whole budget. Marked down, such an
    engine gets no new traffic until it answers again."""
    waited = settings.ENGINE_PROGRESS_TIMEOUT_SECONDS
    client = VLLMClient(
        url,
        timeout=waited,
        engine_key=engine_key,
        allow_plaintext_key=settings.ENGINE_ALLOW_PLAINTEXT_KEY,
    )

    async def counted() -> float | None:
        try:
            return tokens_processed(await client.metrics())
        except (EngineError, ValueError):
            return None

    try:
        before = await counted()
        try:
            await client.completion(model, "ping", max_tokens=1, temperature=0)
        except EngineError as exc:
            if exc.status is not None:  # it answered: whatever it said, it is not stuck
                return ""
            return stall_verdict(before, await counted(), waited)
        return ""
    finally:
        await client.aclose()


async def probe_boundary(engine: Engine) -> str:
    """'' when the engine may be used: the portal has its key, it answers its health route
    and, outside debug, it refuses callers without the key. Else the reason, with its code."""
    refusal = selectors.engine_key_refusal(engine)
    if refusal:
        return refusal  # nothing is sent to an engine the portal has no key for
    key = selectors.engine_key(engine)
    error = await probe_engine(engine.url, key)
    if not error and not settings.DEBUG:
        error = await probe_guard(engine.url)
    if not error and engine.served_model_name:
        error = await probe_progress(engine.url, key, engine.served_model_name)
    return error


def engine_record_probe(
    *, engine: Engine, error: str, capabilities: dict[str, Any] | None = None
) -> Engine:
    """Move an engine between up and down from one probe; draining stays draining (operator's call).

    An engine found down has its residency observed absent: whatever it held may be gone (a
    restart forgets every adapter), and the residency API must not show a version resident
    where nothing can serve it. An engine back from down is up at once when the plugin says it
    holds every version wanted there (HOLDS), else warming until a converge pass has loaded
    them (that pass moves it up at its end, workers.controller)."""
    found = dict(capabilities or {})
    holds = found.pop(HOLDS, None)
    with transaction.atomic():
        locked = Engine.objects.select_for_update().get(pk=engine.pk)
        now = timezone.now()
        before = locked.state
        for key, value in found.items():
            setattr(locked, key, value)
        forgotten = 0
        if error:
            locked.last_error = error[:2000]
            if locked.state != EngineState.DRAINING:
                locked.state = EngineState.DOWN
            if locked.state == EngineState.DOWN and before != EngineState.DOWN:
                forgotten = _observe_nothing(locked, now)
        else:
            locked.last_seen_at = now
            locked.last_error = ""
            if locked.state in (EngineState.WARMING, EngineState.DOWN):
                # Back from down (maybe restarted, its adapters forgotten): warming, no traffic,
                # until the controller has loaded what it should hold; an engine that holds it
                # already (or has nothing to hold) is up at once.
                missing = _wanted_missing(locked, holds)
                locked.state = EngineState.WARMING if missing else EngineState.UP
        locked.save(
            update_fields=[
                "state",
                "last_seen_at",
                "last_error",
                "has_plugin",
                "gpu_observed",
                "max_model_len",
            ]
        )
        _record_uptime(locked, answered=not error, now=now)
        if locked.state == EngineState.WARMING:
            from workers.desired import enqueue_converge

            enqueue_converge(locked)
        if locked.state != before:
            after: dict[str, Any] = {"state": locked.state, "error": locked.last_error}
            if forgotten:
                after["residency_forgotten"] = forgotten
            record_event(
                action="engine.state",
                actor="prober",
                obj=locked,
                object_id=locked.name,
                before={"state": before},
                after=after,
            )
    return locked


def _observe_nothing(engine: Engine, now: Any) -> int:
    """An engine just found down: its residency rows say absent (the next converge pass that
    reaches it writes what it really holds). The engine's own save announces the change to the
    gateway's tables, which read residency with them. How many rows changed."""
    from workers.models import Residency, ResidencyState

    return (
        Residency.objects.filter(engine=engine)
        .exclude(observed_state=ResidencyState.ABSENT)
        .update(observed_state=ResidencyState.ABSENT, observed_at=now, updated_at=now)
    )


def _record_uptime(engine: Engine, *, answered: bool, now: Any) -> None:
    """Engine-hours for the cost view: a probe answered extends the engine's open stretch (or
    opens one); a probe not answered, or a move to another pool, closes it."""
    from workers.models import EngineUptime

    open_stretch = EngineUptime.objects.filter(engine=engine, closed=False).first()
    if open_stretch is not None and (not answered or open_stretch.pool != engine.pool):
        open_stretch.closed = True
        open_stretch.save(update_fields=["closed"])
        open_stretch = None
    if not answered:
        return
    if open_stretch is None:
        EngineUptime.objects.create(
            engine=engine, pool=engine.pool, started_at=now, last_seen_at=now
        )
    else:
        open_stretch.last_seen_at = now
        open_stretch.save(update_fields=["last_seen_at"])


def _wanted_missing(engine: Engine, holds: set[str] | None) -> bool:
    """Whether a version wanted on the engine is not among what it holds (`holds` None: not
    known, so anything wanted counts as missing)."""
    from workers.selectors import wanted_residencies

    wanted = wanted_residencies(engine)
    if holds is None:
        return wanted.exists()
    return wanted.exclude(version__served_name__in=holds).exists()


def engines_probe_all() -> dict[str, str]:
    engines = list(Engine.objects.all())

    async def probe_one(engine: Engine) -> tuple[str, dict[str, Any] | None]:
        error = await probe_boundary(engine)
        if error:
            return error, None
        return "", await probe_capabilities(engine.url, selectors.engine_key(engine))

    async def probe_all() -> list[tuple[str, dict[str, Any] | None]]:
        return list(await asyncio.gather(*(probe_one(engine) for engine in engines)))

    results = asyncio.run(probe_all()) if engines else []
    return {
        engine_record_probe(engine=engine, error=error, capabilities=caps).name: (error or "up")
        for engine, (error, caps) in zip(engines, results, strict=True)
    }


# Operator transitions: an engine may be drained (no new traffic, unloads as its requests end)
# and put back; up/down/warming belong to the prober and the controller.
OPERATOR_TRANSITIONS = {
    "drain": ((EngineState.UP, EngineState.WARMING, EngineState.DOWN), EngineState.DRAINING),
    "undrain": ((EngineState.DRAINING,), EngineState.WARMING),
}


def engine_operator_transition(
    *, access: Any, engine: Engine, verb: str, request_id: str = ""
) -> Engine:
    """drain / undrain, audited; the converge pass that follows sheds or reloads adapters.
    Operators and platform admins (asked here, adapters/access.py)."""
    access.require_platform_role("is_operator")
    actor = access.user
    from core.errors import Conflict
    from workers.desired import enqueue_converge

    allowed, target = OPERATOR_TRANSITIONS[verb]
    with transaction.atomic():
        locked = Engine.objects.select_for_update().get(pk=engine.pk)
        if locked.state not in allowed:
            raise Conflict(
                "engine.bad_transition",
                f"Cannot {verb} engine '{locked.name}' while it is '{locked.state}'.",
                current_state=locked.state,
            )
        before = locked.state
        locked.state = target
        locked.save(update_fields=["state"])
        record_event(
            action=f"engine.{verb}",
            actor=actor,
            obj=locked,
            object_id=locked.name,
            before={"state": before},
            after={"state": target},
            request_id=request_id,
        )
        enqueue_converge(locked)
    return locked


def engine_request_reconcile(*, access: Any, engine: Engine, request_id: str = "") -> None:
    """An operator asks for a converge pass now rather than at the next period (audited)."""
    access.require_platform_role("is_operator")
    actor = access.user
    from workers.desired import enqueue_converge

    with transaction.atomic():
        record_event(
            action="engine.reconcile",
            actor=actor,
            obj=engine,
            object_id=engine.name,
            request_id=request_id,
        )
        enqueue_converge(engine)

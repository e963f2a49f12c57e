"""HTTP routes of the portal plugin: GET /portal/residency, POST /portal/load, /pin, /unpin, /evict.

Error bodies use vLLM's own shape ({"error": {"message", "type", "code"}}) so one client parses
both. The registry of names is vLLM's `app.state.openai_serving_models.lora_requests`
(name -> LoRARequest); what is resident is `engine_client.list_loras()` (ids in the engine's CPU
LoRA cache, which holds every adapter in a GPU slot as well); what sits in the GPU slots comes
from the worker (loading.gpu_slots). The handlers only translate; loading.py does the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from portal_engine_plugin.errors import Refused, error_response
from portal_engine_plugin.loading import gpu_slots, load_verified, read_into_engine, unpin

if TYPE_CHECKING:
    from portal_engine_plugin import PortalState


def _error(refused: Refused) -> JSONResponse:
    return error_response(refused.status, refused.err_type, refused.message)


def _internal(exc: Exception) -> JSONResponse:
    # The engine's own reason, as vLLM's load route reports it (500 InternalServerError).
    return error_response(500, "InternalServerError", str(exc))


def _portal(request: Request) -> PortalState:
    state = getattr(request.app.state, "portal", None)
    if state is None or state.engine_client is None:
        raise Refused(503, "ServiceUnavailable", "portal plugin has no engine client")
    return state


# The engine key is checked for these routes (and every other) by guard.EngineKeyGuard.
router = APIRouter(prefix="/portal")


def _registry(request: Request) -> dict[str, Any]:
    models = getattr(request.app.state, "openai_serving_models", None)
    if models is None:
        raise Refused(503, "ServiceUnavailable", "the server has no LoRA registry")
    return models.lora_requests


async def _residency(request: Request) -> dict[str, Any]:
    portal = _portal(request)
    registry = _registry(request)
    resident_ids = set(await portal.engine_client.list_loras())
    registered_ids = {lora.lora_int_id for lora in registry.values()}
    # A pin ends only with removal from the engine; forget pins whose adapter is gone.
    portal.pinned_ids &= resident_ids
    return {
        "registered": [
            {"name": name, "lora_int_id": lora.lora_int_id, "path": lora.lora_path}
            for name, lora in sorted(registry.items())
        ],
        "resident": sorted(n for n, lora in registry.items() if lora.lora_int_id in resident_ids),
        "pinned": sorted(
            n for n, lora in registry.items() if lora.lora_int_id in portal.pinned_ids
        ),
        "resident_ids": sorted(resident_ids),
        "pinned_ids": sorted(portal.pinned_ids),
        # Weights still in the engine cache after a stock unload forgot their name.
        "orphaned_ids": sorted(resident_ids - registered_ids),
        "max_loras": portal.max_loras,
        "max_cpu_loras": portal.max_cpu_loras,
        "max_lora_rank": portal.max_lora_rank,
        "loads": dict(sorted(portal.load_counts.items())),
        "load_ms": dict(sorted(portal.load_ms.items())),
        **_gpu_view(await gpu_slots(portal=portal), registry),
    }


def _gpu_view(slots: dict[str, Any], registry: dict[str, Any]) -> dict[str, Any]:
    if not slots.get("observed"):
        unknown = dict.fromkeys(("gpu", "gpu_pinned", "gpu_ids", "gpu_pinned_ids"))
        return {"gpu_observed": False, "gpu_reason": slots.get("reason"), **unknown}
    names = {lora.lora_int_id: name for name, lora in registry.items()}
    return {
        "gpu_observed": True,
        "gpu_reason": None,
        "gpu": sorted(names[i] for i in slots["gpu"] if i in names),
        "gpu_pinned": sorted(names[i] for i in slots["gpu_pinned"] if i in names),
        # Least recently used first, as the worker's LRU evicts them.
        "gpu_ids": list(slots["gpu"]),
        "gpu_pinned_ids": list(slots["gpu_pinned"]),
    }


class NameBody(BaseModel):
    name: str


class EvictBody(BaseModel):
    name: str | None = None
    # Evicting by id is for orphans: weights whose name a stock unload already forgot.
    lora_int_id: int | None = None


@router.get("/residency")
async def residency(request: Request) -> Any:
    try:
        return await _residency(request)
    except Refused as refused:
        return _error(refused)


@router.post("/load")
async def load(request: Request) -> Any:
    """Verify `<PORTAL_ADAPTER_ROOT>/<name>` against the manifest, then load it as
    /v1/load_lora_adapter does. Idempotent: a registered name answers `already_loaded`.

    The body is parsed here, not by a pydantic model, so malformed bodies get the plugin's codes.
    """
    try:
        portal = _portal(request)
        models = request.app.state.openai_serving_models
        try:
            body = await request.json()
        except ValueError:
            raise Refused(400, "InvalidUserInput", "request.invalid: body is not JSON") from None
        return await load_verified(portal=portal, models=models, body=body)
    except Refused as refused:
        return _error(refused)
    except Exception as exc:
        return _internal(exc)


@router.post("/unpin")
async def unpin_route(body: NameBody, request: Request) -> Any:
    """End a pin; the adapter stays registered and resident (see loading.unpin)."""
    try:
        portal = _portal(request)
        _registry(request)
        return await unpin(
            portal=portal, models=request.app.state.openai_serving_models, name=body.name
        )
    except Refused as refused:
        return _error(refused)
    except Exception as exc:
        return _internal(exc)


@router.post("/pin")
async def pin(body: NameBody, request: Request) -> Any:
    """Make the adapter resident (if it is not) and pin it in both the CPU cache and a GPU slot.

    Refused (409) when it would leave no unpinned GPU slot or CPU-cache slot: with every slot
    pinned, the next request for another adapter kills vLLM's engine core ("All items are
    pinned, cannot remove oldest from the cache").
    """
    try:
        portal = _portal(request)
        registry = _registry(request)
        lora = registry.get(body.name)
        if lora is None:
            raise Refused(
                404, "NotFoundError", f"The lora adapter '{body.name}' is not registered."
            )
        async with portal.lock:
            resident = set(await portal.engine_client.list_loras())
            portal.pinned_ids &= resident
            wanted = portal.pinned_ids | {lora.lora_int_id}
            limits = [x for x in (portal.max_loras, portal.max_cpu_loras) if x is not None]
            if limits and len(wanted) >= min(limits):
                raise Refused(
                    409,
                    "Conflict",
                    f"pinning '{body.name}' would leave no unpinned slot "
                    f"(max_loras={portal.max_loras}, max_cpu_loras={portal.max_cpu_loras}, "
                    f"pinned={len(portal.pinned_ids)})",
                )
            if lora.lora_int_id not in resident:
                await read_into_engine(portal=portal, lora=lora)
            await portal.engine_client.pin_lora(lora.lora_int_id)
            portal.pinned_ids.add(lora.lora_int_id)
        return {"name": body.name, "lora_int_id": lora.lora_int_id, "pinned": True}
    except Refused as refused:
        return _error(refused)
    except Exception as exc:
        return _internal(exc)


@router.post("/evict")
async def evict(body: EvictBody, request: Request) -> Any:
    """Remove the adapter's weights from the engine cache and its name from the registry.

    Unlike /v1/unload_lora_adapter, which only forgets the name, this frees the engine's slot
    (and ends a pin). A request already running with the adapter makes the engine load it again
    from its path; the controller never evicts a version with requests in flight.
    """
    try:
        portal = _portal(request)
        if (body.name is None) == (body.lora_int_id is None):
            raise Refused(400, "InvalidUserInput", "give exactly one of 'name' or 'lora_int_id'")
        models = request.app.state.openai_serving_models
        if body.name is not None:
            # The plugin's load lock and vLLM's own per-name lock, so no load of the same name
            # (verified or stock) can interleave.
            name = body.name
            async with portal.load_locks[name], models.lora_resolver_lock[name], portal.lock:
                lora = models.lora_requests.get(body.name)
                if lora is None:
                    raise Refused(
                        404, "NotFoundError", f"The lora adapter '{body.name}' cannot be found."
                    )
                removed = await portal.engine_client.remove_lora(lora.lora_int_id)
                del models.lora_requests[name]
                portal.pinned_ids.discard(lora.lora_int_id)
                portal.manifests.pop(name, None)
            lora_int_id = lora.lora_int_id
        else:
            lora_int_id = int(body.lora_int_id or 0)
            async with portal.lock:
                if lora_int_id not in set(await portal.engine_client.list_loras()):
                    raise Refused(
                        404, "NotFoundError", f"No LoRA with id {lora_int_id} is in the engine."
                    )
                removed = await portal.engine_client.remove_lora(lora_int_id)
                portal.pinned_ids.discard(lora_int_id)
        return {
            "name": body.name,
            "lora_int_id": lora_int_id,
            "removed_from_engine": bool(removed),
        }
    except Refused as refused:
        return _error(refused)
    except Exception as exc:
        return _internal(exc)

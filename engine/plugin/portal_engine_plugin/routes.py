"""HTTP routes of the portal plugin: GET /portal/residency, POST /portal/pin, POST /portal/evict.

Error bodies use vLLM's own shape ({"error": {"message", "type", "code"}}) so one client parses
both. The registry of names is vLLM's `app.state.openai_serving_models.lora_requests`
(name -> LoRARequest); what is resident is `engine_client.list_loras()` (ids in the engine's CPU
LoRA cache, which holds every adapter in a GPU slot as well).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

if TYPE_CHECKING:
    from portal_engine_plugin import PortalState

ENGINE_KEY_HEADER = "X-Portal-Engine-Key"


def _error(status: int, err_type: str, message: str) -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content={"error": {"message": message, "type": err_type, "param": None, "code": status}},
    )


class _Refused(Exception):
    """Raised inside a handler to answer with an error body (turned into JSON by _guarded)."""

    def __init__(self, status: int, err_type: str, message: str) -> None:
        super().__init__(message)
        self.status, self.err_type, self.message = status, err_type, message


def _portal(request: Request) -> PortalState:
    state = getattr(request.app.state, "portal", None)
    if state is None or state.engine_client is None:
        raise _Refused(503, "ServiceUnavailable", "portal plugin has no engine client")
    return state


async def require_engine_key(request: Request) -> None:
    """401 unless the caller sends the shared secret; open when PORTAL_ENGINE_KEY is unset.

    HTTPException, because vLLM's own handler turns it into its error body shape.
    """
    state = getattr(request.app.state, "portal", None)
    expected = getattr(state, "engine_key", None)
    if expected is None:
        return
    given = request.headers.get(ENGINE_KEY_HEADER, "")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise HTTPException(status_code=401, detail=f"missing or wrong {ENGINE_KEY_HEADER}")


router = APIRouter(prefix="/portal", dependencies=[Depends(require_engine_key)])


def _registry(request: Request) -> dict[str, Any]:
    models = getattr(request.app.state, "openai_serving_models", None)
    if models is None:
        raise _Refused(503, "ServiceUnavailable", "the server has no LoRA registry")
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
    except _Refused as refused:
        return _error(refused.status, refused.err_type, refused.message)


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
            raise _Refused(
                404, "NotFoundError", f"The lora adapter '{body.name}' is not registered."
            )
        async with portal.lock:
            resident = set(await portal.engine_client.list_loras())
            portal.pinned_ids &= resident
            wanted = portal.pinned_ids | {lora.lora_int_id}
            limits = [x for x in (portal.max_loras, portal.max_cpu_loras) if x is not None]
            if limits and len(wanted) >= min(limits):
                raise _Refused(
                    409,
                    "Conflict",
                    f"pinning '{body.name}' would leave no unpinned slot "
                    f"(max_loras={portal.max_loras}, max_cpu_loras={portal.max_cpu_loras}, "
                    f"pinned={len(portal.pinned_ids)})",
                )
            if lora.lora_int_id not in resident:
                await portal.engine_client.add_lora(lora)
            await portal.engine_client.pin_lora(lora.lora_int_id)
            portal.pinned_ids.add(lora.lora_int_id)
        return {"name": body.name, "lora_int_id": lora.lora_int_id, "pinned": True}
    except _Refused as refused:
        return _error(refused.status, refused.err_type, refused.message)
    except Exception as exc:  # the engine's own reason, as vLLM's load route reports it
        return _error(500, "InternalServerError", str(exc))


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
            raise _Refused(400, "InvalidUserInput", "give exactly one of 'name' or 'lora_int_id'")
        models = request.app.state.openai_serving_models
        if body.name is not None:
            # vLLM's own per-name lock, so a concurrent load of the same name cannot interleave.
            async with models.lora_resolver_lock[body.name], portal.lock:
                lora = models.lora_requests.get(body.name)
                if lora is None:
                    raise _Refused(
                        404, "NotFoundError", f"The lora adapter '{body.name}' cannot be found."
                    )
                removed = await portal.engine_client.remove_lora(lora.lora_int_id)
                del models.lora_requests[body.name]
                portal.pinned_ids.discard(lora.lora_int_id)
            lora_int_id = lora.lora_int_id
        else:
            lora_int_id = int(body.lora_int_id or 0)
            async with portal.lock:
                if lora_int_id not in set(await portal.engine_client.list_loras()):
                    raise _Refused(
                        404, "NotFoundError", f"No LoRA with id {lora_int_id} is in the engine."
                    )
                removed = await portal.engine_client.remove_lora(lora_int_id)
                portal.pinned_ids.discard(lora_int_id)
        return {
            "name": body.name,
            "lora_int_id": lora_int_id,
            "removed_from_engine": bool(removed),
        }
    except _Refused as refused:
        return _error(refused.status, refused.err_type, refused.message)
    except Exception as exc:
        return _error(500, "InternalServerError", str(exc))

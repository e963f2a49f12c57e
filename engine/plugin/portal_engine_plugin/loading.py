"""Verified load, unpin and the GPU-slot view: the plugin's writes to vLLM's LoRA state.

Lock order, everywhere: the plugin's per-name load lock, then vLLM's per-name lock
(`models.lora_resolver_lock[name]`), then the plugin lock (`PortalState.lock`). vLLM's own
`load_lora_adapter` takes `lora_resolver_lock[name]` itself (vllm/entrypoints/openai/models/
serving.py, line 173) and asyncio.Lock is not reentrant, so a verified load cannot hold that lock
around the call; it holds the plugin's per-name load lock across verification and vLLM's load
instead, and evict and unpin take the load lock too.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portal_engine_plugin.errors import Refused
from portal_engine_plugin.files import (
    FileCheckError,
    ManifestEntry,
    adapter_dir,
    check_name,
    check_unchanged,
    parse_manifest,
    verify_dir,
)
from portal_engine_plugin.worker import SLOTS_METHOD

if TYPE_CHECKING:
    from portal_engine_plugin import PortalState

# Bounds a residency call on an engine core that stopped answering (its utility calls queue
# behind engine steps); residency then says the GPU view is unavailable instead of hanging.
SLOTS_TIMEOUT = 10.0


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 3)


async def _verify(path: Path, manifest: tuple[ManifestEntry, ...]) -> Any:
    # Hashing reads whole files: in a thread, so the server's event loop keeps serving.
    try:
        return await asyncio.to_thread(verify_dir, path, manifest)
    except FileCheckError as error:
        raise Refused.from_file_check(error) from None


async def read_into_engine(*, portal: PortalState, lora: Any) -> float:
    """`add_lora` (reads the weights from `lora.lora_path`), counted as a load; returns ms."""
    started = time.perf_counter()
    await portal.engine_client.add_lora(lora)
    elapsed = _ms(started)
    portal.count_load(lora.lora_name, elapsed)
    return elapsed


async def load_verified(*, portal: PortalState, models: Any, body: Any) -> dict[str, Any]:
    """Verify `<root>/<name>` against the manifest, then register it through vLLM's own load."""
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse
    from vllm.entrypoints.serve.lora.protocol import LoadLoRAAdapterRequest

    if not isinstance(body, dict):
        raise Refused(400, "InvalidUserInput", "request.invalid: body must be a JSON object")
    try:
        name = check_name(body.get("name"))
        manifest = parse_manifest(body.get("manifest"))
        path = adapter_dir(portal.adapter_root, name)
    except FileCheckError as error:
        raise Refused.from_file_check(error) from None

    async with portal.load_locks[name]:
        existing = models.lora_requests.get(name)
        if existing is not None:
            return await _already_loaded(portal=portal, name=name, lora=existing, manifest=manifest)
        started = time.perf_counter()
        verified = await _verify(path, manifest)
        verify_ms = _ms(started)

        started = time.perf_counter()
        request = LoadLoRAAdapterRequest(lora_name=name, lora_path=str(path))
        result = await models.load_lora_adapter(request)
        load_ms = _ms(started)
        if isinstance(result, ErrorResponse):
            # vLLM's refusal as its own route gives it (status, type, message).
            raise Refused(result.error.code, result.error.type, result.error.message)
        portal.count_load(name, load_ms)
        lora = models.lora_requests[name]
        try:
            await asyncio.to_thread(check_unchanged, verified)
        except FileCheckError as error:
            # vLLM may have read other bytes than the ones verified: take them out again.
            await _forget(portal=portal, models=models, name=name, lora=lora)
            raise Refused.from_file_check(error) from None
        portal.manifests[name] = manifest
    return {
        "name": name,
        "lora_int_id": lora.lora_int_id,
        "loaded": True,
        "already_loaded": False,
        "verified": True,
        "resident": True,
        "load_ms": load_ms,
        "verify_ms": verify_ms,
    }


async def _already_loaded(
    *, portal: PortalState, name: str, lora: Any, manifest: tuple[ManifestEntry, ...]
) -> dict[str, Any]:
    known = portal.manifests.get(name)
    if known is not None and known != manifest:
        raise Refused.from_file_check(
            FileCheckError("files.conflict", f"'{name}' is loaded from files with another manifest")
        )
    return {
        "name": name,
        "lora_int_id": lora.lora_int_id,
        "loaded": True,
        "already_loaded": True,
        # False when the name came in another way (stock /v1/load_lora_adapter): unverified.
        "verified": known is not None,
        # Registered but possibly pushed out of the engine cache since: the next request (or a
        # pin) reads it again.
        "resident": lora.lora_int_id in set(await portal.engine_client.list_loras()),
        "load_ms": portal.load_ms.get(name),
    }


async def _forget(*, portal: PortalState, models: Any, name: str, lora: Any) -> None:
    async with models.lora_resolver_lock[name], portal.lock:
        await portal.engine_client.remove_lora(lora.lora_int_id)
        portal.pinned_ids.discard(lora.lora_int_id)
        if models.lora_requests.get(name) is lora:
            del models.lora_requests[name]


async def unpin(*, portal: PortalState, models: Any, name: str) -> dict[str, Any]:
    """End a pin, keeping the adapter registered and resident.

    vLLM has no unpin: removing the adapter from the engine drops both pins
    (vllm/utils/cache.py LRUCache.__delitem__), and add_lora reads it back unpinned into the CPU
    cache and a GPU slot (vllm/lora/worker_manager.py LRUCacheWorkerLoRAManager.add_adapter).
    That re-reads the files, so a version this plugin verified is verified again first.
    """
    async with portal.load_locks[name], models.lora_resolver_lock[name], portal.lock:
        lora = models.lora_requests.get(name)
        if lora is None:
            raise Refused(404, "NotFoundError", f"The lora adapter '{name}' is not registered.")
        portal.pinned_ids &= set(await portal.engine_client.list_loras())
        if lora.lora_int_id not in portal.pinned_ids:
            raise Refused(409, "Conflict", f"pin.not_pinned: '{name}' is not pinned")
        manifest = portal.manifests.get(name)
        if manifest is not None:
            await _verify(Path(lora.lora_path), manifest)
        await portal.engine_client.remove_lora(lora.lora_int_id)
        portal.pinned_ids.discard(lora.lora_int_id)
        load_ms = await read_into_engine(portal=portal, lora=lora)
    return {"name": name, "lora_int_id": lora.lora_int_id, "pinned": False, "load_ms": load_ms}


async def gpu_slots(*, portal: PortalState) -> dict[str, Any]:
    """The worker's own view of its LoRA slots, or why it is not available."""
    if not portal.worker_extension:
        return {
            "observed": False,
            "reason": "the engine was started without --worker-extension-cls "
            "portal_engine_plugin.worker.PortalWorkerExtension",
        }
    try:
        per_worker = await asyncio.wait_for(
            portal.engine_client.collective_rpc(SLOTS_METHOD, timeout=SLOTS_TIMEOUT),
            timeout=SLOTS_TIMEOUT + 1.0,
        )
    except Exception as exc:  # a dead or stuck engine core: report, never fail residency
        return {"observed": False, "reason": f"collective_rpc failed: {exc!r}"}
    # Tensor-parallel ranks hold the same adapters in the same slots; rank 0 speaks for all.
    first = per_worker[0] if per_worker else None
    if not isinstance(first, dict):
        return {"observed": False, "reason": f"unexpected worker answer {first!r}"}
    return first


__all__ = ["gpu_slots", "load_verified", "read_into_engine", "unpin"]

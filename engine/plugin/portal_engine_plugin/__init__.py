"""LoRA Portal's vLLM endpoint plugin: what a stock vLLM cannot tell or do for the cache controller.

Routes under /portal/ (see routes.py): residency (which registered adapters really sit in the
engine's LoRA cache and its GPU slots, with load counters), a verified load, pin, unpin, and a
real evict (stock unload only forgets the name in the API server). Loaded by vLLM from the
`vllm.endpoint_plugins` entry point named `portal`, and only when VLLM_PLUGINS lists `portal`
(vllm/plugins/__init__.py: load_endpoint_plugins).

POST /portal/load refuses with a stable code at the start of the error message, which the portal
matches on (workers/vllm_client.py: file_error_code):
- 400 `name.invalid` (not `^[a-z0-9][a-z0-9-]{0,118}[a-z0-9]$`), `manifest.invalid`, `request.invalid`
- 503 `root.unset` (PORTAL_ADAPTER_ROOT not set on the engine), `root.missing` (not a directory)
- 409 `files.missing` (a manifest file, or the directory, is absent), `files.extra` (anything
  else in the directory), `files.not_regular` (a symlink, directory or device where a file or the
  adapter's directory should be), `files.size_mismatch`, `files.sha256_mismatch`,
  `files.changed` (a file changed while hashed or between verification and vLLM's read; the
  adapter is taken out again), `files.conflict` (the name is loaded from another manifest)
- vLLM's own refusals keep vLLM's status and message (rank too large -> 500 "... max_lora_rank").
POST /portal/unpin: 404 unknown name, 409 `pin.not_pinned`, or a `files.*` code when the files
of a verified version no longer match (unpin re-reads them).

GPU residency. The slots live only in the worker process (LoRAModelManager._active_adapters,
vllm/lora/model_manager.py line 114); the API server reaches the worker only through
`engine_client.collective_rpc` (vllm/v1/engine/async_llm.py line 1205), which the engine core runs
as a utility call and hands to the worker by name (vllm/v1/executor/multiproc_executor.py line
1051: getattr(worker, method)). A callable cannot be sent: the engine-core channel is msgpack and
refuses functions unless VLLM_ALLOW_INSECURE_SERIALIZATION=1 (vllm/v1/serial_utils.py line 220),
which would turn on pickle for every message on that channel; we do not. No stock worker method
reports the GPU slots (list_loras returns the CPU cache, vllm/lora/model_manager.py line 1371).
So the plugin adds one read-only method through vLLM's supported extension point,
`--worker-extension-cls portal_engine_plugin.worker.PortalWorkerExtension`
(vllm/v1/worker/worker_base.py line 296), which engine/launcher.py passes; residency then reports
`"gpu"` and `"gpu_observed": true`. An engine started without that flag reports
`"gpu_observed": false` with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
from argparse import Namespace
from collections import defaultdict
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import State

from portal_engine_plugin.files import ADAPTER_ROOT_ENV, ManifestEntry, adapter_root_from
from portal_engine_plugin.guard import ENGINE_KEY_ENV, EngineKeyGuard, engine_key_from_env
from portal_engine_plugin.routes import router
from portal_engine_plugin.worker import WORKER_EXTENSION

PLUGIN_NAME = "portal"

logger = logging.getLogger("vllm.portal_engine_plugin")


class PortalState:
    """Per-app state the routes use: the engine client, the LoRA limits, the pins we made, the
    adapter root, the manifests we verified and the load counters.

    vLLM keeps no list of pinned adapters that the API server can read, so the plugin records the
    ids it pinned itself. Load counters count the weight reads this plugin caused (verified loads,
    pin of a non-resident adapter, unpin's re-read), not the engine's own re-reads after its LRU
    dropped an adapter.
    """

    def __init__(
        self, engine_client: Any, engine_key: str | None, adapter_root: Path | None = None
    ) -> None:
        self.engine_client = engine_client
        self.engine_key = engine_key
        self.adapter_root = adapter_root
        vllm_config = getattr(engine_client, "vllm_config", None) if engine_client else None
        lora_config = getattr(vllm_config, "lora_config", None)
        self.max_loras: int | None = getattr(lora_config, "max_loras", None)
        self.max_cpu_loras: int | None = getattr(lora_config, "max_cpu_loras", None)
        self.max_lora_rank: int | None = getattr(lora_config, "max_lora_rank", None)
        parallel_config = getattr(vllm_config, "parallel_config", None)
        self.worker_extension = (
            getattr(parallel_config, "worker_extension_cls", "") == WORKER_EXTENSION
        )
        self.pinned_ids: set[int] = set()
        self.manifests: dict[str, tuple[ManifestEntry, ...]] = {}
        self.load_counts: dict[str, int] = {}
        self.load_ms: dict[str, float] = {}
        # Pin, unpin and evict read-modify-write the engine cache; one at a time keeps the rules true.
        self.lock = asyncio.Lock()
        # Verification and load of one name, one at a time (see loading.py for the lock order).
        self.load_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def count_load(self, name: str, elapsed_ms: float) -> None:
        self.load_counts[name] = self.load_counts.get(name, 0) + 1
        self.load_ms[name] = elapsed_ms


class PortalEndpointPlugin:
    """The object vLLM's EndpointPlugin protocol asks for (vllm/plugins/endpoint_plugins)."""

    name = PLUGIN_NAME
    # LoRA serving only exists for generation; this also keeps the plugin off the CPU-only
    # render server, where there is no engine client.
    required_tasks = ("generate",)

    def attach_router(self, app: FastAPI) -> None:
        app.include_router(router)
        engine_key = engine_key_from_env()
        if engine_key is not None:
            # Every route but liveness needs the key (guard.py says why vLLM's --api-key alone
            # leaves runtime LoRA routes open). The app has not started, so middleware may be added.
            app.add_middleware(EngineKeyGuard, key=engine_key)

    async def init_state(self, engine_client: Any, state: State, args: Namespace) -> None:
        engine_key = engine_key_from_env()
        if engine_key is None:
            logger.warning(
                "%s is not set: every route of this engine (runtime LoRA loads, /portal/, "
                "inference) accepts any caller. Only for development on a private network.",
                ENGINE_KEY_ENV,
            )
        adapter_root = adapter_root_from(os.environ.get(ADAPTER_ROOT_ENV))
        if adapter_root is None:
            logger.warning("%s is not set: /portal/load refuses every load.", ADAPTER_ROOT_ENV)
        state.portal = PortalState(engine_client, engine_key, adapter_root)
        logger.info(
            "portal plugin ready: max_loras=%s max_cpu_loras=%s max_lora_rank=%s "
            "adapter_root=%s gpu_slots_observable=%s",
            state.portal.max_loras,
            state.portal.max_cpu_loras,
            state.portal.max_lora_rank,
            adapter_root,
            state.portal.worker_extension,
        )


__all__ = ["PLUGIN_NAME", "PortalEndpointPlugin", "PortalState"]

"""LoRA Portal's vLLM endpoint plugin: what a stock vLLM cannot tell or do for the cache controller.

Routes under /portal/ (see routes.py): residency (which registered adapters really sit in the
engine's LoRA cache), pin, and a real evict (stock unload only forgets the name in the API server).
Loaded by vLLM from the `vllm.endpoint_plugins` entry point named `portal`, and only when
VLLM_PLUGINS lists `portal` (vllm/plugins/__init__.py: load_endpoint_plugins).
"""

from __future__ import annotations

import asyncio
import logging
import os
from argparse import Namespace
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import State

from portal_engine_plugin.routes import router

PLUGIN_NAME = "portal"
ENGINE_KEY_ENV = "PORTAL_ENGINE_KEY"

logger = logging.getLogger("vllm.portal_engine_plugin")


class PortalState:
    """Per-app state the routes use: the engine client, the LoRA limits, and the pins we made.

    vLLM keeps no list of pinned adapters that the API server can read, so the plugin records the
    ids it pinned itself; a pin ends only when the adapter is removed from the engine (vLLM has no
    unpin), which evict does.
    """

    def __init__(self, engine_client: Any, engine_key: str | None) -> None:
        self.engine_client = engine_client
        self.engine_key = engine_key
        lora_config = engine_client.vllm_config.lora_config if engine_client else None
        self.max_loras: int | None = getattr(lora_config, "max_loras", None)
        self.max_cpu_loras: int | None = getattr(lora_config, "max_cpu_loras", None)
        self.max_lora_rank: int | None = getattr(lora_config, "max_lora_rank", None)
        self.pinned_ids: set[int] = set()
        # Pin and evict read-modify-write the engine cache; one at a time keeps the rules true.
        self.lock = asyncio.Lock()


class PortalEndpointPlugin:
    """The object vLLM's EndpointPlugin protocol asks for (vllm/plugins/endpoint_plugins)."""

    name = PLUGIN_NAME
    # LoRA serving only exists for generation; this also keeps the plugin off the CPU-only
    # render server, where there is no engine client.
    required_tasks = ("generate",)

    def attach_router(self, app: FastAPI) -> None:
        app.include_router(router)

    async def init_state(self, engine_client: Any, state: State, args: Namespace) -> None:
        engine_key = os.environ.get(ENGINE_KEY_ENV) or None
        if engine_key is None:
            logger.warning(
                "%s is not set: /portal/ routes accept any caller. Keep the engine port on "
                "a network only workers and the gateway reach.",
                ENGINE_KEY_ENV,
            )
        state.portal = PortalState(engine_client, engine_key)
        logger.info(
            "portal plugin ready: max_loras=%s max_cpu_loras=%s max_lora_rank=%s",
            state.portal.max_loras,
            state.portal.max_cpu_loras,
            state.portal.max_lora_rank,
        )


__all__ = ["PLUGIN_NAME", "PortalEndpointPlugin", "PortalState"]

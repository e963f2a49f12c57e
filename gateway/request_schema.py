"""The one request schema at the gateway's edge: the OpenAI subset it serves, checked before any
engine sees a request, and the bounds of the caller's plan (tenants/plan.py).

Pydantic (already a dependency through the `openai` client; its Rust core validates a chat
request in microseconds: docs/benchmarks.md, gateway overhead). Strict: `"stream": "false"` is a
string, not a boolean, and is refused instead of being read two ways. Unknown fields are refused:
a field reaches an engine only if it is listed here. The allow-list is everything OpenAI's API
takes for chat and completions (so the official client passes whatever it is given), plus the
vLLM sampling extras named under "vLLM extras" (docs/security.md, "request schema").
Fields the gateway sets itself (`cache_salt`) or that steer the engine (`priority`,
`kv_transfer_params`, `lora_request`, ...) are not in the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.errors import GatewayError

Count = Annotated[int, Field(ge=1)]
NonNegative = Annotated[int, Field(ge=0)]
Stop = str | list[str]
Json = dict[str, Any]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM extra


class _Sampling(_Strict):
    """What both endpoints take."""

    model: str
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: Count | None = None
    max_tokens: Count | None = None
    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    stop: Stop | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM extras (the allow-list): sampling only, nothing that steers the engine itself.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: NonNegative | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    stop_token_ids: list[int] | None = None
    prompt_logprobs: NonNegative | None = None
    structured_outputs: Json | None = None
    response_format: Json | None = None


class ChatRequest(_Sampling):
    messages: Annotated[list[Json], Field(min_length=1)]
    max_completion_tokens: Count | None = None
    logprobs: bool | None = None
    top_logprobs: NonNegative | None = None
    tools: list[Json] | None = None
    tool_choice: str | Json | None = None
    parallel_tool_calls: bool | None = None
    functions: list[Json] | None = None
    function_call: str | Json | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    modalities: list[str] | None = None
    audio: Json | None = None
    prediction: Json | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    web_search_options: Json | None = None
    # vLLM extras for chat templates.
    chat_template_kwargs: Json | None = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    echo: bool | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    best_of: Count | None = None
    echo: bool | None = None
    logprobs: NonNegative | None = None
    suffix: str | None = None


SCHEMAS: dict[str, type[_Sampling]] = {"chat": ChatRequest, "completion": CompletionRequest}


@dataclass(frozen=True, slots=True)
class Plan:
    """A tenant's per-request bounds, as the gateway's tables hold them (tenants/plan.py)."""

    max_n: int
    max_prompts: int
    max_tokens: int
    max_logprobs: int
    max_prompt_logprobs: int
    max_prompt_bytes: int
    max_structured_output_bytes: int


@dataclass(frozen=True, slots=True)
class Checked:
    """What the gateway needs to know about a valid request."""

    stream: bool
    wants_usage: bool
    weight: int  # sequences the engine will run: prompts x max(n, best_of)
    # The plan's cap on generated tokens when the caller named none (absent or null): the
    # gateway sends it, or the engine would generate up to its context length.
    default_max_tokens: int | None = None
    # What a budget reserves (gateway.budgets): the prompt's size in bytes (every token is at least
    # one byte), the messages it holds (each costs the chat template a few tokens), and the most
    # tokens one sequence may generate (its own max_tokens, or the plan's cap).
    prompt_bytes: int = 0
    messages: int = 0
    max_tokens_each: int = 0


def check_request(kind: str, payload: dict[str, Any], plan: Plan) -> Checked:
    """Validate `payload` (a JSON object) for `kind`; 400 naming the field, or its weight."""
    try:
        request = SCHEMAS[kind].model_validate(payload)
    except ValidationError as exc:
        raise _invalid(exc) from None
    sequences = max(request.n or 1, getattr(request, "best_of", None) or 1)
    prompts = _prompt_count(request)
    _bound("n", sequences, plan.max_n, "sequences per prompt (n, best_of)")
    _bound("prompt", prompts, plan.max_prompts, "prompts per request")
    limit_tokens = plan.max_tokens
    for name in ("max_tokens", "max_completion_tokens", "min_tokens"):
        _bound(name, getattr(request, name, None), limit_tokens, "tokens")
    for name in ("logprobs", "top_logprobs"):
        value = getattr(request, name, None)
        if not isinstance(value, bool):
            _bound(name, value, plan.max_logprobs, "log probabilities")
    _bound("prompt_logprobs", request.prompt_logprobs, plan.max_prompt_logprobs, "prompt logprobs")
    prompt_bytes = _prompt_bytes(request)
    _bound("prompt", prompt_bytes, plan.max_prompt_bytes, "bytes of prompt")
    for name in ("structured_outputs", "response_format"):
        value = getattr(request, name)
        if value is not None:
            size = len(orjson.dumps(value))
            _bound(name, size, plan.max_structured_output_bytes, "bytes of structured output")
    options = request.stream_options
    named = (request.max_tokens, getattr(request, "max_completion_tokens", None))
    given = [n for n in named if n is not None]
    return Checked(
        stream=bool(request.stream),
        wants_usage=bool(options and options.include_usage),
        weight=prompts * sequences,
        default_max_tokens=limit_tokens if not given else None,
        prompt_bytes=prompt_bytes,
        messages=len(getattr(request, "messages", None) or ()),
        max_tokens_each=max(given) if given else limit_tokens,
    )


def forwarded_max_tokens(checked: Checked, context_len: int) -> int | None:
    """The `max_tokens` the gateway sends one engine for a request that named none: the plan's
    cap, within the engine's context length when known (vLLM refuses more than that); None when
    the caller named its own."""
    cap = checked.default_max_tokens
    if cap is None or context_len <= 0:
        return cap
    return min(cap, context_len)


def _prompt_count(request: _Sampling) -> int:
    if not isinstance(request, CompletionRequest):
        return 1
    prompt = request.prompt
    if isinstance(prompt, str) or not prompt or isinstance(prompt[0], int):
        return 1
    return len(prompt)


def _prompt_bytes(request: _Sampling) -> int:
    """What the request puts before the model, in bytes, without serialising it again: every
    string of the prompt and `suffix`, or of the messages (content and its parts, tool call
    arguments, names) as UTF-8, token ids at 4 bytes; tool and function definitions (and a
    forced choice of one) at their JSON size, since the chat template renders them whole."""
    if isinstance(request, CompletionRequest):
        parts: list[Any] = [request.prompt, request.suffix]
        definitions: list[Any] = []
    else:
        chat: Any = request
        parts = list(chat.messages)
        definitions = [chat.tools, chat.functions, chat.tool_choice, chat.function_call]
    size = sum(len(orjson.dumps(d)) for d in definitions if d is not None)
    while parts:
        part = parts.pop()
        if isinstance(part, str):
            size += len(part.encode())
        elif isinstance(part, bool) or part is None:
            continue
        elif isinstance(part, int):
            size += 4
        elif isinstance(part, list):
            parts.extend(part)
        elif isinstance(part, dict):
            parts.extend(part.values())
    return size


def _bound(field: str, value: int | None, limit: int, what: str) -> None:
    if value is not None and value > limit:
        raise GatewayError(
            400,
            f"`{field}` asks for {value} {what}; this tenant's plan allows at most {limit}. "
            "Ask a platform admin to raise the plan, or send smaller requests.",
            code="over_plan_limit",
            param=field,
        )


def _invalid(exc: ValidationError) -> GatewayError:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    field = str(error["loc"][0]) if error["loc"] else None  # the top-level field
    if error["type"] == "extra_forbidden":
        message = (
            f"Unknown field `{field}`: the gateway does not pass it on "
            "(docs/security.md lists the fields it takes)."
        )
    else:
        message = f"`{where}`: {error['msg']}."
    return GatewayError(400, message, code="invalid_request", param=field)

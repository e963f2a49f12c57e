"""gateway.playground.TokenSink: the gateway's SSE reply, as serve() sends it, becomes token
callbacks as it passes; an error reply or an error event becomes a coded error."""

from __future__ import annotations

import orjson

from gateway.playground import TokenSink


def sse(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def delta(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": text}}]})


async def run(*messages: dict) -> tuple[TokenSink, list[str]]:
    seen: list[str] = []

    async def on_token(text: str) -> None:
        seen.append(text)

    sink = TokenSink(on_token, started=0.0)
    for message in messages:
        await sink(message)
    return sink, seen


def start(status: int = 200) -> dict:
    return {"type": "http.response.start", "status": status, "headers": []}


def body(data: bytes, more: bool = True) -> dict:
    return {"type": "http.response.body", "body": data, "more_body": more}


async def test_each_delta_is_a_token_as_it_arrives_and_usage_counts_them():
    usage = sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})
    sink, seen = await run(
        start(),
        body(sse({"choices": [{"delta": {"role": "assistant"}}]}) + delta("Tea")),
        body(delta(" is") + delta(" hot")),
        body(usage + b"data: [DONE]\n\n"),
        body(b"", more=False),
    )
    assert seen == ["Tea", " is", " hot"]
    result = sink.result("support@1")
    assert sink.error is None and result.tokens == 3 and result.ttft_ms is not None
    assert result.tokens_per_s is not None and result.tokens_per_s > 0


async def test_an_event_split_across_pieces_is_read_whole():
    event = delta("Tea")
    _, seen = await run(start(), body(event[:9]), body(event[9:]))
    assert seen == ["Tea"]


async def test_an_error_reply_becomes_a_coded_error():
    error = orjson.dumps({"error": {"message": "too long", "code": "context_length"}})
    sink, seen = await run(start(400), body(error), body(b"", more=False))
    assert seen == [] and sink.error == ("gateway.context_length", "too long")


async def test_an_error_event_mid_stream_becomes_a_coded_error():
    sink, seen = await run(start(), body(delta("Te") + sse({"error": {"message": "engine died"}})))
    assert seen == ["Te"] and sink.error == ("gateway.engine_502", "engine died")

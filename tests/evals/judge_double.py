"""A judge double (a test double, named as such): an OpenAI-compatible stand-in for an engine that
serves a judge base model, which reads the two quoted answers of the pairwise judge's prompt and
prefers the one that is not `disliked`.

A judge that reads answers cannot run here: the tiny model's words are random, so its constrained
choice says nothing about the answers. The shadow tests that need a candidate to lose its pairs
use this stand-in for the judge alone; the stable and the candidate are asked of real engines
through the real gateway path, and the judge's request reaches the double through that path too
(an Engine row of its own base model, as the gateway's tables read it).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from adapters.models import BaseModel
from workers.models import Engine, EngineState

NAME = "judge-double"


def choose(content: str, disliked: str) -> str:
    """'A' or 'B' for the answer that is not `disliked`, 'TIE' when neither (or both) is."""
    answers = dict(re.findall(r"<answer-([AB])-[0-9a-f]+>\n(.*?)\n</answer-\1-", content, re.S))
    a, b = answers.get("A", "") == disliked, answers.get("B", "") == disliked
    if a and not b:
        return "B"
    if b and not a:
        return "A"
    return "TIE"


class JudgeDouble:
    def __init__(self, disliked: str) -> None:
        self.disliked = disliked
        self.asked: list[dict[str, Any]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                self._reply(b"{}", "application/json")

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                double.asked.append(body)
                content = body["messages"][-1]["content"]
                word = choose(content, double.disliked)
                usage = {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51}
                chunk = {
                    "id": "judge-double",
                    "object": "chat.completion.chunk",
                    "model": NAME,
                    "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": "stop"}],
                }
                last = {**chunk, "choices": [], "usage": usage}
                text = f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(last)}\n\ndata: [DONE]\n\n"
                self._reply(text.encode(), "text/event-stream")

            def _reply(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@contextmanager
def judge_double(disliked: str) -> Iterator[JudgeDouble]:
    """The double serving, as an engine of the base model `judge-double` in the shared pool."""
    double = JudgeDouble(disliked)
    thread = threading.Thread(target=double.server.serve_forever, daemon=True)
    thread.start()
    base = BaseModel.objects.create(name=NAME, source="test double", architecture="double")
    Engine.objects.create(
        name=NAME,
        base_model=base,
        url=double.url,
        served_model_name=NAME,
        max_loras=1,
        max_cpu_loras=1,
        max_lora_rank=8,
        max_model_len=4096,
        state=EngineState.UP,
        pool="shared",
    )
    try:
        yield double
    finally:
        double.server.shutdown()
        double.server.server_close()

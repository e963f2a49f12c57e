"""Service classes into the engine (issue 46, part 3): engines run with `--scheduling-policy
priority` (engine/launcher.py), so the vLLM 0.32 CPU engine takes the `priority` the gateway
sets from each request's class (gateway.class_policy.engine_priority: 0 gold ... 3 background).
(vLLM 0.32 also reads an `X-Vllm-Priority` header; the gateway sends engines only headers of its
own, gateway/upstream.py, so a caller cannot set it that way either.)"""

from __future__ import annotations

import pytest

from gateway.class_policy import DEFAULT_PLANS, engine_priority
from tests.fixtures.engines import EngineHandle

pytestmark = pytest.mark.engine

PROMPT = [{"role": "user", "content": "Hello there"}]


def test_the_launcher_starts_engines_with_priority_scheduling(engine_a: EngineHandle) -> None:
    command = engine_a.process.config.command()
    assert command[command.index("--scheduling-policy") + 1] == "priority"


async def test_the_engine_takes_every_class_priority(engine_a: EngineHandle) -> None:
    priorities = {engine_priority(plan.name, DEFAULT_PLANS) for plan in DEFAULT_PLANS} | {
        engine_priority("", DEFAULT_PLANS, background=True)
    }
    assert priorities == {0, 1, 2, 3}
    async with engine_a.client() as engine:
        for priority in sorted(priorities):
            reply = await engine.chat(
                engine_a.served_model_name, PROMPT, max_tokens=2, temperature=0, priority=priority
            )
            assert reply["usage"]["completion_tokens"] == 2

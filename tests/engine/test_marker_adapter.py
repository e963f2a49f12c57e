"""The adapter built to fail a live check (engine/marker_adapter.py): on a real engine its
greedy answer to any prompt carries the banned marker (`marker_of`), which a sample adapter's
answers never do, so a `not_contains` check passes the stable and fails the candidate
(docs/releases.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.marker_adapter import marker_of, write_marker_adapter
from evals.scoring.live_checks import passes
from tests.fixtures.engines import EngineHandle

pytestmark = pytest.mark.engine
Stage = Callable[..., tuple[str, str]]
PROMPTS = [
    "Hello there, how are you?",
    "Give me the refund policy as JSON.",
    "a",
    "My order 12345 arrived broken and late; what now?",
    "Summarise our call in three bullet points.",
    "¿Dónde está mi pedido?",
]


def test_it_is_the_same_bytes_every_time(tiny_model_dir: Path, tmp_path: Path) -> None:
    base = tiny_model_dir / "base"
    first = write_marker_adapter(tmp_path / "one", base_dir=base)
    second = write_marker_adapter(tmp_path / "two", base_dir=base)
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


async def test_its_greedy_answers_carry_the_marker_and_a_samples_never_do(
    engine_a: EngineHandle, stage_adapter: Stage, tiny_model_dir: Path, tmp_path: Path
) -> None:
    base = tiny_model_dir / "base"
    marker = marker_of(base)
    bad_dir = write_marker_adapter(tmp_path / "marker", base_dir=base)
    check = {"not_contains": [marker]}
    async with engine_a.client() as engine:
        answers: dict[str, list[str]] = {}
        for source in ("sample-r8", bad_dir):
            name, path = stage_adapter(engine_a, source)
            await engine.load_adapter(name, path)
            answers[str(source)] = [
                (
                    await engine.chat(
                        name,
                        [{"role": "user", "content": prompt}],
                        temperature=0,
                        max_tokens=16,
                    )
                )["choices"][0]["message"]["content"]
                for prompt in PROMPTS
            ]
    bad, good = answers[str(bad_dir)], answers["sample-r8"]
    assert all(marker in text for text in bad), bad
    assert not any(marker in text for text in good), good
    assert [passes(t, check) for t in good] == [True] * len(PROMPTS)
    assert [passes(t, check) for t in bad] == [False] * len(PROMPTS)

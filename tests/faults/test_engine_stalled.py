"""An engine whose core stops making progress while its API server keeps answering (seen in
bench-load: a vLLM worker stalled for minutes, its API server went on accepting requests with 200
and answering /health, and every request sent there waited out its whole budget).

The prober's one-token request finds it (/health alone says up), the engine is marked down so
the gateway sends it nothing new, and it is up again as soon as its core goes on; the other
engine is untouched. The session's real engine A, its engine core process stopped (SIGSTOP)
while its API server runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.faults.record import FaultRecord, Stopwatch, wait_until
from workers.models import EngineState
from workers.services.engines import engines_probe_all, probe_engine

pytestmark = [pytest.mark.engine, pytest.mark.django_db]
WAIT_S = 3.0


def engine_core_pids(root_pid: int) -> list[int]:
    """The engine's core processes (vLLM names them VLLM::EngineCore): in the root's process
    group, whatever their parent."""
    group = os.getpgid(root_pid)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            pid = int(entry.name)
            if comm.startswith("VLLM::EngineCor") and os.getpgid(pid) == group:
                found.append(pid)
        except (OSError, ProcessLookupError):
            continue
    return found


@contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_an_engine_whose_core_is_stuck_is_marked_down_and_comes_back(fleet, settings):
    settings.ENGINE_PROGRESS_TIMEOUT_SECONDS = WAIT_S
    handle, engine, other = fleet.handle_a, fleet.a, fleet.b
    before = engines_probe_all()
    assert (before[engine.name], before[other.name]) == ("up", "up")
    root = handle.process.pid
    assert root is not None
    cores = engine_core_pids(root)
    assert cores, "no VLLM::EngineCore process in the engine's group"
    with stopped(cores):
        # What the prober looked at before: the API server still says healthy.
        assert asyncio.run(probe_engine(handle.base_url, handle.engine_key)) == ""
        watch = Stopwatch()
        verdicts = engines_probe_all()
        found_s = watch.elapsed()
        engine.refresh_from_db()
        other.refresh_from_db()
        assert verdicts[engine.name].startswith("engine.stalled"), verdicts
        assert engine.state == EngineState.DOWN
        assert "engine.stalled" in engine.last_error
        assert other.state == EngineState.UP  # busy or idle, a working engine keeps its state
    back = Stopwatch()
    wait_until(
        lambda: engines_probe_all()[engine.name] == "up",
        timeout=60,
        what="the engine taken back once its core goes on",
    )
    heal_s = back.elapsed()
    engine.refresh_from_db()
    assert engine.state in (EngineState.UP, EngineState.WARMING)
    FaultRecord(
        fault="engine-core-stalled",
        title="An engine's core stopped (SIGSTOP of its EngineCore process) while its API "
        "server runs and answers /health",
        part="engine",
        caller_saw=f"the prober found it in {found_s:.1f} s (a one-token request unfinished "
        f"after {WAIT_S:g} s, no token processed meanwhile) and marked it down: the gateway "
        "sends it nothing new (before: up all along, every request to it waited out its budget)",
        heal_s=heal_s,
        lost="nothing: taken back at the first probe after its core went on; the other "
        "engine untouched",
        test="tests/faults/test_engine_stalled.py::"
        "test_an_engine_whose_core_is_stuck_is_marked_down_and_comes_back",
    ).write()

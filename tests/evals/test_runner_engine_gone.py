"""An engine SIGKILLed while an eval run's answers stream from it: the answers it held fail with a
readable reason, the rest of the run goes on (on the other engine), the run finishes, and its
summary counts the failed answers by reason. The session's two real engines; the run is the
Celery task's own code, in a thread of the test.

The engine is killed from the runner's own thread, in the step that hands an answer's first
tokens to the runner: the engine is then at most as far into that answer as the runner's first
read of it shows (plus what it makes during that one step), far from the end of an answer of
MAX_TOKENS, so it cannot have finished what it holds. Killed from the test's thread after it saw
an answer begin (by polling), the test lost that race about half the time under CPU load: the
engine ran ahead of the runner by about as much as a whole answer (64 tokens then), so by the
time the kill landed it had often written every answer it held into the connection, read by the
runner afterwards, and the kill cut nothing.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from evals.models import EvalCaseResult, EvalRun
from evals.selectors import run_summary_dict
from gateway.exchange import Exchange
from gateway.routes import EngineInfo
from tests.evals.runs import gated_run_held_back
from tests.workers.conftest import worker_fleet  # noqa: F401 - fixture

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

# An answer takes the engine this many steps (the tiny model never stops early). Under CPU load
# the runner's first read of an answer held up to 57 tokens (make test-stress, 256-token answers):
# the engine runs that far ahead of the runner, so an answer much longer than that is still being
# generated when its first tokens reach the runner.
MAX_TOKENS = 768


class KillOnFirstTokens:
    """SIGKILLs an engine's process group from inside the gateway's relay, once: right after the
    runner has been handed the first piece of an answer (tokens, its stream not ended) that the
    engine is streaming. `killed`: the engine's name; `tokens_at_kill`: what that answer had
    handed the runner then; `tokens_delivered`: all it handed the runner (what the connection
    still held when the engine died)."""

    def __init__(self, monkeypatch: Any, process_groups: dict[str, int]) -> None:
        self.process_groups = process_groups
        self.killed = ""
        self.tokens_at_kill = 0
        self.tokens_delivered = 0
        self.lock = threading.Lock()
        run = Exchange.run

        async def run_watched(exchange: Exchange, engine: EngineInfo, *args: Any, **kw: Any) -> Any:
            send = exchange.send
            trigger = False

            async def send_then_maybe_kill(message: dict[str, Any]) -> None:
                nonlocal trigger
                await send(message)
                watch = exchange.watch
                handed = message["type"] == "http.response.body" and message.get("body")
                if handed and watch is not None and watch.streamed and not watch.done:
                    trigger = trigger or self.kill(engine.name, watch.streamed)

            exchange.send = send_then_maybe_kill
            try:
                return await run(exchange, engine, *args, **kw)
            finally:
                if trigger and exchange.watch is not None:
                    self.tokens_delivered = exchange.watch.streamed

        monkeypatch.setattr(Exchange, "run", run_watched)

    def kill(self, engine: str, tokens: int) -> bool:
        """Kill `engine` if nothing was killed yet; whether this call did."""
        with self.lock:
            if self.killed or engine not in self.process_groups:
                return False
            os.killpg(self.process_groups[engine], signal.SIGKILL)
            self.killed, self.tokens_at_kill = engine, tokens
            return True


def test_an_engine_killed_mid_run_fails_the_cases_it_held_with_a_reason(
    worker_fleet,  # noqa: F811 - fixture
    tmp_path,
    monkeypatch,
    settings,
    engine_control,
    record_property,
):
    from evals.services import runner

    fleet = worker_fleet
    world = fleet.world
    settings.EVAL_RUN_CONCURRENCY = 4
    world.acme.eval_max_case_tokens = MAX_TOKENS  # within the engine's context (1024)
    world.acme.save()
    cases = [
        {"id": f"c{i}", "prompt": f"Tell story {i}.", "max_tokens": MAX_TOKENS} for i in range(6)
    ]
    run = gated_run_held_back(world, monkeypatch, tmp_path, cases, seed=13)
    handles = {fleet.a.name: fleet.handle_a, fleet.b.name: fleet.handle_b}
    groups: dict[str, int] = {}
    for name, handle in handles.items():
        assert handle.process.process is not None
        groups[name] = handle.process.process.pid  # the launcher's group: server, core, worker
    killer = KillOnFirstTokens(monkeypatch, groups)
    ended: list[EvalRun | None] = []
    thread = threading.Thread(
        target=lambda: ended.append(runner.run_execute(run.pk, "engine-gone")), daemon=True
    )
    thread.start()
    thread.join(timeout=600)
    assert not thread.is_alive(), "the run did not end"
    assert killer.killed, "no answer streamed from an engine"
    killed = handles[killer.killed].process.process
    assert killed is not None and killed.wait(timeout=60) == -signal.SIGKILL
    # The answer that was handed its first tokens never reached its end.
    record_property("tokens_at_kill", killer.tokens_at_kill)
    record_property("tokens_delivered", killer.tokens_delivered)
    assert 0 < killer.tokens_at_kill <= killer.tokens_delivered < MAX_TOKENS

    finished = EvalRun.objects.get(pk=run.pk)
    assert ended and ended[0] is not None
    assert finished.status == "finished", finished.error
    assert not finished.error  # the run itself did not fail
    rows = list(EvalCaseResult.objects.filter(run=run))
    assert sorted((r.case_id, r.side) for r in rows) == sorted(
        (c["id"], s) for c in cases for s in ("candidate", "baseline")
    )
    failed = [r for r in rows if r.error]
    # The answers the engine was streaming when it died: failed, saying so.
    assert failed, "no answer was cut by the engine's death"
    assert any("engine went away" in r.error or "ended the stream" in r.error for r in failed), [
        r.error for r in failed
    ]
    for row in failed:
        code, _, message = row.error.partition(":")
        assert code.strip() and message.strip(), row.error
    # The other answers are whole: the rest of the run went on.
    assert len(failed) < len(rows)
    assert all(r.completion_tokens == MAX_TOKENS for r in rows if not r.error)
    # The summary counts them by reason, side by side.
    counts: dict[str, dict[str, int]] = {}
    for row in failed:
        reason = row.error.split(":", 1)[0].strip()
        counts.setdefault(row.side, {})[reason] = counts.get(row.side, {}).get(reason, 0) + 1
    assert finished.summary["failed"] == counts
    assert run_summary_dict(finished)["failed"] == counts
    page = world.client("alice").get(
        "/api/v1/tenants/acme/adapters/support/versions/1/eval-runs/1/"
    )
    assert page.json()["summary"]["failed"] == counts

"""An engine SIGKILLed while an eval run's answers stream from it: the answers it held fail with a
readable reason, the rest of the run goes on (on the other engine), the run finishes, and its
summary counts the failed answers by reason. The session's two real engines; the run is the
Celery task's own code, in a thread of the test.

The moment is chosen so that it cannot race: the engine is stopped (SIGSTOP) from the runner's
own thread in the step that hands an answer's first tokens to the runner; stopped, it writes
nothing more, so once the runner has read what the connections held, the answers it holds from
that engine with tokens and no end will never end. The engine is then killed; if it had finished
every answer it held, it goes on (SIGCONT) and is stopped at the next answer's first tokens.
Killed from the test's thread once an answer had begun, the test failed about half the time
under CPU load: the engine's processes run ahead of the runner's one (its first read of an
answer held up to 294 tokens; killed at that read, one answer of 768 still came whole), so the
kill often landed after the engine had written whole answers of 64 tokens, and cut nothing.
"""

from __future__ import annotations

import asyncio
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
from tests.faults.record import wait_until
from tests.workers.conftest import worker_fleet  # noqa: F401 - fixture

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

MAX_TOKENS = 256  # the plan's largest per case: an answer takes the engine many steps


def _unread_from(port: int) -> int:
    """Bytes the server on `port` sent that its clients have not read yet: its connections'
    send queues and their clients' receive queues (the kernel's, /proc/net/tcp and tcp6)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                local, remote, state, queues = row.split()[1:5]
                if state != "01":  # established only
                    continue
                tx, rx = (int(q, 16) for q in queues.split(":"))
                if int(local.rsplit(":", 1)[1], 16) == port:
                    total += tx
                elif int(remote.rsplit(":", 1)[1], 16) == port:
                    total += rx
    return total


def _all_stopped(group: int) -> bool:
    """Every process of the process group is stopped (state T in /proc/<pid>/stat) or dead."""
    states = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == group:  # state, ppid, pgrp
            states.append(fields[0])
    return bool(states) and all(state in ("T", "Z") for state in states)


class FreezeOnFirstTokens:
    """Stops an engine (SIGSTOP, its whole process group) from inside the gateway's relay, right
    after the runner has been handed the first piece of an answer it streams (tokens, the stream
    not ended). A stopped engine writes nothing more, so once the runner has read what the
    connections held (`drained`), `unfinished` says for certain whether the runner holds an
    answer from it that has tokens and will never end: the engine is then killed, or let go on
    (SIGCONT) and stopped again at the next answer's first tokens."""

    def __init__(self, monkeypatch: Any, process_groups: dict[str, int]) -> None:
        self.process_groups = process_groups
        self.frozen = threading.Event()
        self.engine = ""  # the engine stopped now
        self.loop: asyncio.AbstractEventLoop | None = None
        self.streams: dict[str, set[Exchange]] = {name: set() for name in process_groups}
        self.lock = threading.Lock()
        run = Exchange.run

        async def run_watched(exchange: Exchange, engine: EngineInfo, *args: Any, **kw: Any) -> Any:
            send = exchange.send

            async def send_then_maybe_stop(message: dict[str, Any]) -> None:
                await send(message)
                watch = exchange.watch
                handed = message["type"] == "http.response.body" and message.get("body")
                if handed and watch is not None and watch.streamed and not watch.done:
                    self.stop(engine.name)

            exchange.send = send_then_maybe_stop
            self.streams.setdefault(engine.name, set()).add(exchange)
            try:
                return await run(exchange, engine, *args, **kw)
            finally:
                self.streams[engine.name].discard(exchange)

        monkeypatch.setattr(Exchange, "run", run_watched)

    def stop(self, engine: str) -> None:
        with self.lock:
            if self.frozen.is_set() or engine not in self.process_groups:
                return
            os.killpg(self.process_groups[engine], signal.SIGSTOP)
            self.engine, self.loop = engine, asyncio.get_running_loop()
            self.frozen.set()

    def unfinished(self) -> list[tuple[int, bool]]:
        """(tokens handed, ended) of each answer the stopped engine streams to the runner, read
        on the runner's own loop: its step that read the connections' last bytes runs first."""
        assert self.loop is not None

        async def read() -> list[tuple[int, bool]]:
            return [
                (e.watch.streamed, e.watch.done)
                for e in self.streams[self.engine]
                if e.watch is not None
            ]

        return asyncio.run_coroutine_threadsafe(read(), self.loop).result(timeout=60)

    def go_on(self) -> None:
        """SIGCONT the stopped engine; the next answer's first tokens stop one again."""
        with self.lock:
            os.killpg(self.process_groups[self.engine], signal.SIGCONT)
            self.engine = ""
            self.frozen.clear()


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
    cases = [
        {"id": f"c{i}", "prompt": f"Tell story {i}.", "max_tokens": MAX_TOKENS} for i in range(6)
    ]
    run = gated_run_held_back(world, monkeypatch, tmp_path, cases, seed=13)
    handles = {fleet.a.name: fleet.handle_a, fleet.b.name: fleet.handle_b}
    groups: dict[str, int] = {}
    for name, handle in handles.items():
        assert handle.process.process is not None
        groups[name] = handle.process.process.pid  # the launcher's group: server, core, worker
    freezer = FreezeOnFirstTokens(monkeypatch, groups)
    ended: list[EvalRun | None] = []
    thread = threading.Thread(
        target=lambda: ended.append(runner.run_execute(run.pk, "engine-gone")), daemon=True
    )
    thread.start()

    stops = 0
    while True:
        assert freezer.frozen.wait(timeout=300), "no answer streamed from an engine"
        stops += 1
        name = freezer.engine
        # Stopped, the engine sends nothing more: wait until the runner has read it all.
        wait_until(lambda: _all_stopped(groups[name]), timeout=60, what=f"{name} stopped")
        wait_until(
            lambda: _unread_from(handles[name].port) == 0,
            timeout=120,
            interval=0.05,
            what=f"the runner read all {name} sent",
        )
        held = [(tokens, done) for tokens, done in freezer.unfinished() if tokens and not done]
        if held:
            break
        freezer.go_on()  # it had finished every answer it held: wait for another one
    os.killpg(groups[name], signal.SIGKILL)  # stopped or not, it dies at once
    killed = handles[name].process.process
    assert killed is not None and killed.wait(timeout=60) == -signal.SIGKILL
    record_property("engine_stops", stops)
    record_property("tokens_of_cut_answers", sorted(tokens for tokens, _ in held))
    thread.join(timeout=600)
    assert not thread.is_alive(), "the run did not end"

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

"""Two engine nodes, each with its own worker on its own queue (`<prefix><engine>`) and its own
adapter root: one node's worker gone (SIGKILL) leaves the other node placing and serving, and
its own engine's residency untouched; when the worker comes back its node converges, with no hand.

The session's two real CPU engines; two Celery workers of this test's own, one per node queue
(the session's worker consumes other queues: this test sets its own queue prefix).
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

import pytest

from tests.faults.harness import (
    chain_verifies,
    forget_other_tests_checkpoint,
    resident_on,
    spawn_worker,
)
from tests.faults.record import FaultRecord, Stopwatch, wait_until
from tests.fixtures.celery_worker import _stop
from tests.workers.fleet import servable_version
from workers.desired import set_desired

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


def _node_worker(prefix: str, engine: str, storage: str) -> subprocess.Popen[bytes]:
    proc, _ = spawn_worker(
        f"{prefix}{engine}",
        pool="threads",
        concurrency=2,
        ENGINE_QUEUE_PREFIX=prefix,
        ADAPTER_STORAGE_ROOT=storage,
    )
    return proc


def test_one_nodes_worker_gone_leaves_the_other_node_alone(worker_fleet, tmp_path, settings):
    fleet = worker_fleet
    forget_other_tests_checkpoint()
    prefix = f"faults-{uuid.uuid4().hex[:6]}.node."
    settings.ENGINE_QUEUE_PREFIX = prefix
    storage = str(settings.ADAPTER_STORAGE_ROOT)
    workers = {e.name: _node_worker(prefix, e.name, storage) for e in (fleet.a, fleet.b)}
    try:
        first = servable_version(fleet.world.support, tmp_path, seed=61)
        for engine in (fleet.a, fleet.b):
            set_desired(version=first, engine=engine, state="registered", reason="t")
        wait_until(lambda: first.served_name in resident_on(fleet.handle_a), timeout=240, what="A")
        wait_until(lambda: first.served_name in resident_on(fleet.handle_b), timeout=240, what="B")
        a_before = resident_on(fleet.handle_a)

        gone = workers.pop(fleet.a.name)
        os.killpg(gone.pid, signal.SIGKILL)
        gone.wait()
        second = servable_version(fleet.world.support, tmp_path, seed=62)
        for engine in (fleet.a, fleet.b):
            set_desired(version=second, engine=engine, state="registered", reason="t")
        # B's own worker places it on B, whatever A's node is doing.
        b_s = wait_until(
            lambda: second.served_name in resident_on(fleet.handle_b), timeout=240, what="B alone"
        )
        # A's engine keeps what it held: nothing unloaded it, nothing else loaded it.
        assert resident_on(fleet.handle_a) == a_before
        back = Stopwatch()
        workers[fleet.a.name] = _node_worker(prefix, fleet.a.name, storage)
        wait_until(
            lambda: second.served_name in resident_on(fleet.handle_a),
            timeout=240,
            what="A's node converges once its worker is back",
        )
        heal_s = back.elapsed()
    finally:
        for proc in workers.values():
            _stop(proc)
    assert chain_verifies()
    FaultRecord(
        fault="node-worker-gone",
        title="Two nodes, a worker each on its own queue: node A's worker SIGKILLed",
        part="workers",
        caller_saw=f"node B placed a new version alone ({b_s:.1f} s); engine A kept serving "
        "what it held (its residency untouched); A's node placed nothing meanwhile",
        heal_s=heal_s,
        lost="nothing: A's queued task ran when its worker came back (acks_late); "
        "audit chain verifies",
        test="tests/faults/test_node_worker_gone.py::"
        "test_one_nodes_worker_gone_leaves_the_other_node_alone",
    ).write()

"""An engine restarted under a one-engine pool, tried as a new user would: the official `openai`
client through two gateway replicas run with the deployed settings, a real Celery worker and a
real beat with the deployed reconcile period. Once the residency API shows the version resident
on the restarted engine (the fleet reloaded it, nobody asked), the next chat, sent at once, is
served by every replica: the one whose chat met the stopped engine and marked it, and the one
that only heard of the restart from the fleet.

The session's real CPU engine A (B drained: A alone serves), its worker, a beat of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from adapters.access import AccessContext
from tenants.services.tokens import token_issue
from tests.faults.harness import chain_verifies, forget_other_tests_checkpoint
from tests.faults.record import FaultRecord, wait_until
from tests.fixtures.celery_worker import REPO, _service_env, _stop, beat_command
from tests.fixtures.gateway import gateway_log_tail, running_gateway
from tests.gateway.test_hostile_engines import token
from tests.paths import TEST_VAR
from tests.workers.fleet import servable_version
from workers.controller import converge_engine
from workers.desired import set_desired

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
RESIDENT = {"resident_gpu", "resident_cpu", "pinned"}


@pytest.fixture
def deployed_beat(celery_worker_process, tmp_path) -> Iterator[None]:
    """A real beat with the deployed schedule (reconcile every 30 s, the prober every 30 s):
    whatever waits for a later pass shows as a long wait, not one hidden by a short period."""
    log = TEST_VAR / f"celery-beat-deployed-{uuid.uuid4().hex[:6]}.log"
    proc = subprocess.Popen(
        beat_command(tmp_path / "beat-schedule"),
        cwd=REPO,
        env=_service_env(celery_worker_process["queue"]),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield
    finally:
        _stop(proc)


def _read(base: str, operator: str, path: str) -> dict:
    """An operator's read of the fleet's API (what a person or a script would look at)."""
    reply = httpx.get(
        f"{base}/api/v1/engines/{path}", headers={"authorization": f"Bearer {operator}"}, timeout=10
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def _pings(base_url: str) -> bool:
    try:
        return httpx.get(base_url + "/ping", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _shows_resident(base: str, operator: str, engine: str, served: str) -> bool:
    """The residency API shows `served` resident on `engine` (GPU, CPU cache or pinned)."""
    rows = _read(base, operator, f"{engine}/residency/")["results"]
    return any(r["served_name"] == served and r["observed_state"] in RESIDENT for r in rows)


def _story(engine, version) -> str:
    """What the fleet did, for a failing assertion's message."""
    from core.audit_models import AuditEvent
    from workers.models import Engine, FleetAction, Residency

    states = [
        f"{e.created_at:%H:%M:%S.%f} {e.actor_label or ''} {e.before} -> {e.after}"
        for e in AuditEvent.objects.filter(action="engine.state", object_id=engine.name).order_by(
            "id"
        )
    ]
    actions = [
        f"{a.created_at:%H:%M:%S.%f} {a.kind} ok={a.ok} {a.error[:80]}"
        for a in FleetAction.objects.filter(engine=engine, served_name=version.served_name)
    ]
    row = Residency.objects.filter(engine=engine, version=version).first()
    now = Engine.objects.get(pk=engine.pk)
    return (
        f"engine now {now.state} (last seen {now.last_seen_at}); residency "
        f"{row.observed_state if row else None} at {row.observed_at if row else None}\n"
        f"states: {states}\nactions: {actions}"
    )


def test_the_first_chat_once_the_api_shows_a_restarted_engine_resident_is_served(
    worker_fleet, tmp_path, engine_control, deployed_beat, celery_worker_process
):
    """From the moment the fleet has seen the engine gone until a chat is served again: every
    time the residency API shows the version resident, a chat sent at once on each replica is
    served. (Before: the API kept showing it resident on the down engine, and an engine back
    from down stayed warming, taking no traffic, until a converge pass had loaded every wish.)"""
    import openai

    fleet = worker_fleet
    world = fleet.world
    forget_other_tests_checkpoint()
    fleet.b.state = "draining"  # engine A alone serves (the prober leaves a drained engine be)
    fleet.b.save()
    version = servable_version(world.support, tmp_path, seed=4471)
    served = version.served_name
    set_desired(version=version, engine=fleet.a, state="registered", reason="t", converge=False)
    converge_engine(fleet.a)
    alice = token(world, "alice", world.acme)
    operator = token_issue(
        access=AccessContext.for_user(world.users["olga"]), scopes=["read"]
    ).plaintext
    queue = celery_worker_process["queue"]
    # The deployed settings: tables trusted up to 5 s without a change message, a replica's
    # mark on an engine it could not reach held up to 10 s.
    with running_gateway(queue) as marked, running_gateway(queue) as told:
        clients = {
            base: openai.OpenAI(base_url=base + "/v1", api_key=alice, max_retries=0)
            for base in (marked, told)
        }

        def ask(base: str) -> str:
            """The model that answered, or the refusal's status and message."""
            try:
                return (
                    clients[base]
                    .chat.completions.create(
                        model="support", messages=[{"role": "user", "content": "tea"}], max_tokens=2
                    )
                    .model
                )
            except openai.APIStatusError as exc:
                return f"{exc.status_code} {exc.message}"

        assert [ask(b) for b in clients] == [served] * 2
        assert _shows_resident(marked, operator, fleet.a.name, served)
        process = fleet.handle_a.process.process
        assert process is not None
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        away = ask(marked)  # meets the killed engine: the replica marks it, the fleet probes
        assert away.startswith("503 "), away
        wait_until(
            lambda: _read(marked, operator, f"{fleet.a.name}/")["state"] == "down",
            timeout=60,
            what="the fleet shows the engine down",
        )
        # The reverse: an engine that does not answer gets no request from a replica that
        # never met it (and, in the loop below, is never shown holding the version).
        meanwhile = ask(told)
        assert meanwhile.startswith("503 "), meanwhile

        # Started from this thread (a helper thread's end would stop it: the engine dies with
        # the thread that started it), its /ping watched here with the API.
        fleet.handle_a.process.start()
        started = time.monotonic()
        ready_at: float | None = None
        misses: list[str] = []
        answers: dict[str, str] = {}
        while time.monotonic() - started < 600 and len(misses) < 3:
            if ready_at is None and _pings(fleet.handle_a.base_url):
                ready_at = time.monotonic()
            if _shows_resident(marked, operator, fleet.a.name, served):
                shown_at = time.monotonic()
                answers = {base: ask(base) for base in clients}
                if set(answers.values()) == {served}:
                    served_at = time.monotonic()
                    break
                misses.append(
                    f"{shown_at - started:.2f} s after the start, engine "
                    f"{'answering /ping' if ready_at else 'not answering yet'}: {answers}"
                )
            time.sleep(0.05)
        fleet.handle_a.process.wait_ready(timeout=600)  # bounds a broken engine only
        assert not misses and set(answers.values()) == {served}, (
            f"{misses}\n{answers}\n{_story(fleet.a, version)}\n{gateway_log_tail(told)}"
        )
        assert ready_at is not None
        ready_s = ready_at - started
        served_s = served_at - ready_at
        shown_s = shown_at - ready_at
    assert chain_verifies()
    FaultRecord(
        fault="engine-restarted-first-call",
        title="An engine SIGKILLed and started again, alone in its pool, under two gateway "
        "replicas (one whose chat met the dead engine); the deployed reconcile period",
        part="engine",
        caller_saw=f"while it was away: {away[:3]} on both replicas, and the residency API "
        "showed the version absent; once the API showed it resident again, the next chat on "
        "each replica was served (official openai client, no retries)",
        heal_s=round(served_s, 2),
        lost=f"nothing: the version resident again {shown_s:.2f} s after the engine answered "
        f"/ping (ready after {ready_s:.0f} s), by the fleet with no hand",
        test="tests/faults/test_engine_restart_first_call.py::"
        "test_the_first_chat_once_the_api_shows_a_restarted_engine_resident_is_served",
    ).write()

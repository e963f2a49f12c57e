"""Redis stalled (CLIENT PAUSE) and then killed and restarted, under a real portal (uvicorn) and the
live publisher (manage.py publish_live_metrics), both on a Redis of the suite's own.

Policy (docs/reliability.md): what needs no Redis keeps working (the API and pages read
PostgreSQL; sessions live there), anything that needs Redis answers JSON with a code in a bounded
time instead of hanging or a bare 500 (sign-in, whose throttle lives in Redis, refuses with
503 `service.unavailable`: no password is checked while attempts cannot be counted), and the
live publisher skips the seconds it cannot publish and resumes by itself.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from adapters.access import AccessContext
from tenants.services.tokens import token_issue
from tests.faults.harness import CallerLog, chain_verifies, ledger, portal_env, start_portal
from tests.faults.record import REPO, FaultRecord, Stopwatch, wait_until
from tests.paths import TEST_VAR
from tests.portal.live_helpers import session_headers

pytestmark = pytest.mark.django_db(transaction=True)
PAUSE_MS = 4000
DOWN_S = 3.0
TICK_KEY = "lp:live:tick:*"


def _calls(client: httpx.Client, caller: CallerLog, token: str, cookie: str) -> None:
    bearer = {"authorization": f"Bearer {token}"}
    caller.call(client, "GET", "/api/v1/tenants/", headers=bearer)
    caller.call(client, "GET", "/", headers={"cookie": cookie})
    caller.call(client, "GET", "/healthz")
    caller.call(
        client,
        "POST",
        "/api/v1/auth/token/",
        json={"username": "alice", "password": "wrong", "scopes": ["read"]},
    )


def test_the_portal_and_the_publisher_ride_out_a_stalled_then_restarted_redis(world, own_redis):
    token = token_issue(access=AccessContext.for_user(world.users["alice"]), scopes=["read"])
    cookie = dict(session_headers(world.users["alice"]))[b"cookie"].decode()
    before = ledger()
    server = start_portal("redis", REDIS_URL=own_redis.url, HEALTHZ_CACHE_SECONDS="0")
    publisher_log = TEST_VAR / "faults-publisher.log"
    publisher = subprocess.Popen(
        [sys.executable, "manage.py", "publish_live_metrics"],
        cwd=REPO,
        env={**portal_env(REDIS_URL=own_redis.url), "PYTHONUNBUFFERED": "1"},
        stdout=publisher_log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    stalled, down = CallerLog(), CallerLog()
    try:
        ticks = own_redis.client()
        wait_until(lambda: ticks.keys(TICK_KEY), timeout=30, what="the publisher ticks")
        with httpx.Client(base_url=server.url, timeout=30) as client:
            own_redis.pause(PAUSE_MS)
            watch = Stopwatch()
            while watch.elapsed() < PAUSE_MS / 1000:
                _calls(client, stalled, token.plaintext, cookie)
            own_redis.kill()
            watch = Stopwatch()
            while watch.elapsed() < DOWN_S:
                _calls(client, down, token.plaintext, cookie)
            own_redis.start()
            back = Stopwatch()
            login_heal = wait_until(
                lambda: (
                    client.post(
                        "/api/v1/auth/token/",
                        json={"username": "alice", "password": "wrong", "scopes": ["read"]},
                    ).status_code
                    == 401
                ),
                timeout=60,
                what="sign-in answers again",
            )
            publisher_heal = back.elapsed() + wait_until(
                lambda: own_redis.client().keys(TICK_KEY), timeout=60, what="ticks again"
            )
        assert publisher.poll() is None, "the publisher died"
    finally:
        publisher.terminate()
        publisher.wait(timeout=20)
        server.stop()

    for log in (stalled, down):
        assert log.not_json() == [], log.summary()
        assert [a for a in log.answers if a.status == 500] == [], log.summary()
    refused = {a.code for a in down.answers if a.status == 503}
    assert refused <= {"service.unavailable", "healthz degraded"}, down.summary()
    api_and_pages = [a for a in stalled.answers + down.answers if a.code == ""]
    assert api_and_pages, "nothing was served while Redis was away"
    # Each refused sign-in that was checked is audited once (auth.login_failed), no more.
    from core.audit_models import AuditEvent

    checked = sum(1 for a in stalled.answers + down.answers if a.code == "auth.invalid_credentials")
    failed_logins = AuditEvent.objects.filter(action="auth.login_failed").count()
    after = ledger()
    assert after["audit events"] - before["audit events"] == failed_logins
    assert failed_logins >= checked
    assert {k: v for k, v in after.items() if k != "audit events"} == {
        k: v for k, v in before.items() if k != "audit events"
    }
    assert chain_verifies()
    FaultRecord(
        fault="redis-portal",
        title=f"Redis stalled {PAUSE_MS / 1000:g} s (CLIENT PAUSE), then killed for {DOWN_S:g} s "
        "and restarted empty: API, pages, /healthz, sign-in, live publisher",
        part="portal",
        caller_saw=f"stalled: {stalled.summary()}; down: {down.summary()}",
        heal_s=max(login_heal, publisher_heal),
        lost="nothing: no row lost or doubled (versions, decisions, audit events, usage); "
        "audit chain verifies; the live pages miss the seconds Redis was away",
        test="tests/faults/test_redis_portal.py::"
        "test_the_portal_and_the_publisher_ride_out_a_stalled_then_restarted_redis",
    ).write()

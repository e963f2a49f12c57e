"""PostgreSQL unavailable for a few seconds, under a real portal (uvicorn) on the test database.

How it is broken: on the shared cluster, the test database stops taking connections
(`ALTER DATABASE ... ALLOW_CONNECTIONS false`) and every backend of the portal's pool is
terminated (`pg_terminate_backend`), for OUTAGE_S; then connections are allowed again. (A cluster
of its own would also do; this one breaks only the test database and costs no start-up.)
Meanwhile the API must answer JSON with a code (503 `service.database_unavailable` and
Retry-After), writes must leave nothing half-done, and the first request after the database is
back must be served (the pool must not hand out its dead connections).
"""

from __future__ import annotations

import httpx
import psycopg
import pytest
from django.db import connection

from adapters.access import AccessContext
from tenants.services.tokens import token_issue
from tests.faults.harness import CallerLog, chain_verifies, ledger, start_portal
from tests.faults.record import FaultRecord, Stopwatch, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
OUTAGE_S = 3.0
APP = "lp-faults-portal"  # the portal's connections, by name: the test's own are left alone


def _admin() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres", autocommit=True
    )


def _terminate(admin: psycopg.Connection, name: str) -> int:
    row = admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = %s AND application_name = %s",
        [name, APP],
    ).fetchone()
    return int(row[0]) if row else 0


def _cut(admin: psycopg.Connection, name: str) -> None:
    admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    _terminate(admin, name)


def _restore(admin: psycopg.Connection, name: str) -> None:
    admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def test_the_portal_answers_json_meanwhile_and_heals_at_once(world):
    name = connection.settings_dict["NAME"]
    token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["read", "write"]
    ).plaintext
    before = ledger()
    server = start_portal("postgres", PGAPPNAME=APP)
    admin = _admin()
    caller = CallerLog()
    try:
        with httpx.Client(
            base_url=server.url, headers={"authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            for _ in range(3):  # the pool holds live connections now
                assert client.get("/api/v1/tenants/").status_code == 200
            _cut(admin, name)
            down = Stopwatch()
            try:
                while down.elapsed() < OUTAGE_S:
                    caller.call(client, "GET", "/api/v1/tenants/")
                    caller.call(
                        client,
                        "POST",
                        "/api/v1/tenants/acme/adapters/",
                        json={"name": f"made-{len(caller.answers)}", "base_model": "tiny-llama"},
                    )
            finally:
                _restore(admin, name)
            back = Stopwatch()
            first = caller.call(client, "GET", "/api/v1/tenants/")
            heal_s = back.elapsed()
            if first.status != 200:
                heal_s = (
                    wait_until(
                        lambda: client.get("/api/v1/tenants/").status_code == 200,
                        timeout=60,
                        what="the API serves again",
                    )
                    + heal_s
                )
    finally:
        _restore(admin, name)
        admin.close()
        server.stop()

    assert caller.not_json() == [], caller.summary()
    failed = [a for a in caller.answers if a.status >= 500]
    assert failed, "the outage was not seen: nothing was broken"
    assert {a.code for a in failed} == {"service.database_unavailable"}
    assert first.status == 200, "the first request after the outage was not served"
    # Writes meanwhile were refused whole: no adapter without its audit event, or the reverse.
    from adapters.models import Adapter

    made = Adapter.objects.filter(name__startswith="made-").count()
    after = ledger()
    assert after["audit events"] - before["audit events"] == made
    assert chain_verifies()
    FaultRecord(
        fault="postgres-unavailable",
        title=f"PostgreSQL: the database refuses connections and every one is cut, {OUTAGE_S:g} s",
        part="portal",
        caller_saw=f"API (reads and writes): {caller.summary()}",
        heal_s=heal_s,
        lost=f"nothing: {made} writes that got through, each with its audit event; "
        "no half-written row; audit chain verifies",
        test="tests/faults/test_postgres_down.py::"
        "test_the_portal_answers_json_meanwhile_and_heals_at_once",
    ).write()


def test_connections_cut_under_a_live_pool_cost_no_request(world):
    """A failover or restart cuts every connection while the database takes new ones at once:
    the first request to meet a dead connection gets a JSON 503 at once and the pool is renewed,
    so no later request gets a dead one (before: one failure per dead pooled connection)."""
    from concurrent.futures import ThreadPoolExecutor

    name = connection.settings_dict["NAME"]
    token = token_issue(access=AccessContext.for_user(world.users["alice"]), scopes=["read"])
    server = start_portal("postgres-cut", PGAPPNAME=APP)
    admin = _admin()
    caller = CallerLog()
    try:
        headers = {"authorization": f"Bearer {token.plaintext}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            with ThreadPoolExecutor(8) as pool:  # the pool opens several connections
                codes = list(
                    pool.map(lambda _: client.get("/api/v1/tenants/").status_code, range(32))
                )
            assert set(codes) == {200}
            cut = _terminate(admin, name)
            watch = Stopwatch()
            for _ in range(8):
                caller.call(client, "GET", "/api/v1/tenants/")
            served_all_s = watch.elapsed()
    finally:
        admin.close()
        server.stop()
    assert cut >= 2, "the pool held too few connections to show anything"
    failed = [a for a in caller.answers if a.status != 200]
    assert [(a.status, a.code) for a in failed] in (
        [],
        [(503, "service.database_unavailable")],
    ), caller.summary()
    assert all(a.status == 200 for a in caller.answers[len(failed) :]), caller.summary()
    FaultRecord(
        fault="postgres-connections-cut",
        title=f"PostgreSQL: every connection cut at once ({cut} of the portal's), database up",
        part="portal",
        caller_saw=f"the next 8 API reads: {caller.summary()}",
        heal_s=served_all_s if failed else 0.0,
        lost=f"nothing (reads); the 8 answered in {served_all_s:.2f} s",
        test="tests/faults/test_postgres_down.py::"
        "test_connections_cut_under_a_live_pool_cost_no_request",
    ).write()

"""Sign-ins are throttled on every path (page, admin, token endpoint) per real client address,
and a flood of failures leaves a bounded trail in the audit chain."""

from __future__ import annotations

import secrets

import pytest
from rest_framework.test import APIClient

from core.audit_models import AuditEvent
from core.login_guard import KEY_PREFIX, _pair_key, _redis, clear_login_counters
from tenants.models import ApiToken
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/v1/auth/token/"
WRONG = {"username": "alice", "password": "wrong", "scopes": ["read"]}


def fresh_address() -> str:
    # Counts live in Redis, which other test runs on this machine share: each test has its own.
    address = f"198.18.{secrets.randbelow(256)}.{secrets.randbelow(256)}"
    clear_login_counters(address)
    return address


@pytest.fixture
def addr():
    return fresh_address()


@pytest.fixture
def limit3(settings):
    settings.AXES_FAILURE_LIMIT = 3


def failed_rows():
    return list(AuditEvent.objects.filter(action="auth.login_failed").order_by("id"))


def page_login(client, password, addr, **extra):
    return client.post(
        "/login/", {"username": "alice", "password": password}, REMOTE_ADDR=addr, **extra
    )


def token_request(body, addr, **extra):
    return APIClient().post(TOKEN_URL, body, format="json", REMOTE_ADDR=addr, **extra)


def test_page_login_locks_out_even_with_the_right_password(world, client, addr, limit3):
    codes = [page_login(client, "wrong", addr).status_code for _ in range(3)]
    assert codes == [200, 200, 429]  # the failure that reaches the limit is refused already
    response = page_login(client, PASSWORD, addr)
    assert response.status_code == 429
    assert b"auth.locked_out" in response.content
    assert int(response["Retry-After"]) > 0
    assert "_auth_user_id" not in client.session


def test_admin_login_locks_out_after_the_limit(world, client, addr, limit3):
    world.users["adam"].is_staff = True
    world.users["adam"].save()
    url = "/admin/login/?next=/admin/"
    for _ in range(3):
        client.post(url, {"username": "adam", "password": "wrong"}, REMOTE_ADDR=addr)
    response = client.post(url, {"username": "adam", "password": PASSWORD}, REMOTE_ADDR=addr)
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_token_endpoint_locks_out_with_a_json_error_and_mints_nothing(world, addr, limit3):
    assert [token_request(WRONG, addr).status_code for _ in range(3)] == [401, 401, 429]
    response = token_request({**WRONG, "password": PASSWORD}, addr)
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "auth.locked_out"
    assert int(response["Retry-After"]) > 0
    assert not ApiToken.objects.exists()


def test_the_lockout_is_shared_by_the_page_and_the_token_endpoint(world, client, addr, limit3):
    for _ in range(3):
        page_login(client, "wrong", addr)
    assert token_request({**WRONG, "password": PASSWORD}, addr).status_code == 429


def test_without_trusted_proxies_a_forged_forwarded_for_does_not_escape(
    world, client, addr, limit3
):
    for n in range(3):
        page_login(client, "wrong", addr, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
    forged = page_login(client, PASSWORD, addr, HTTP_X_FORWARDED_FOR="198.51.100.99")
    assert forged.status_code == 429


def test_behind_one_trusted_proxy_the_client_is_the_rightmost_address(
    world, client, settings, limit3
):
    settings.TRUSTED_PROXY_COUNT = 1
    proxy, victim, neighbour = fresh_address(), fresh_address(), fresh_address()
    # The proxy appends the address it saw; whatever the client wrote before it is ignored.
    for n in range(3):
        page_login(client, "wrong", proxy, HTTP_X_FORWARDED_FOR=f"10.9.9.{n}, {victim}")
    locked = page_login(client, PASSWORD, proxy, HTTP_X_FORWARDED_FOR=f"1.2.3.4, {victim}")
    assert locked.status_code == 429
    # Another client behind the same proxy (same REMOTE_ADDR) is not locked out.
    assert page_login(client, PASSWORD, proxy, HTTP_X_FORWARDED_FOR=neighbour).status_code == 302


def test_the_token_throttle_keys_on_the_client_behind_the_proxy(world, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    settings.AXES_FAILURE_LIMIT = 1000
    proxy, first, second = fresh_address(), fresh_address(), fresh_address()
    codes = [token_request(WRONG, proxy, HTTP_X_FORWARDED_FOR=first).status_code for _ in range(31)]
    assert set(codes[:30]) == {401} and codes[30] == 429
    assert token_request(WRONG, proxy, HTTP_X_FORWARDED_FOR=second).status_code == 401


def test_a_flood_writes_one_row_per_address_username_and_window(world, settings, addr):
    settings.AXES_FAILURE_LIMIT = 1000
    for _ in range(25):
        token_request(WRONG, addr)
    rows = failed_rows()
    assert len(rows) == 1
    assert rows[0].object_id == "alice"
    assert rows[0].after == {"client_ip": addr, "failures": 1}
    # The window ends (its gate key expires): the next row stands for every failure since.
    _redis(settings.REDIS_URL).delete(f"{_pair_key(addr, 'alice')}:gate")
    token_request(WRONG, addr)
    rows = failed_rows()
    assert len(rows) == 2 and rows[1].after["failures"] == 25


def test_failed_login_rows_have_a_cluster_wide_budget_per_minute(world, settings):
    settings.AXES_FAILURE_LIMIT = 1000
    settings.LOGIN_FAILED_AUDIT_PER_MINUTE = 5
    client = _redis(settings.REDIS_URL)
    client.delete(*client.keys(f"{KEY_PREFIX}:budget:*") or ["-"])  # earlier tests' rows
    client.delete(f"{KEY_PREFIX}:unaudited:auth.login_failed")
    for n in range(20):
        token_request({**WRONG, "username": f"guess{n}"}, fresh_address())
    # Five a minute (ten if the run straddles a minute boundary), never one per failure.
    written = len(failed_rows())
    assert 5 <= written <= 10
    # The budget frees: the next row says how many windows the budget left out before it.
    client.delete(*client.keys(f"{KEY_PREFIX}:budget:*") or ["-"])
    token_request({**WRONG, "username": "guess-last"}, fresh_address())
    last = failed_rows()[-1]
    assert last.object_id == "guess-last" and last.after["unaudited_before"] == 20 - written

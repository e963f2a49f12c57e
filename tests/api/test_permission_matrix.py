"""The generated permission matrix (tests/api/matrix.py) and the meta-tests that keep it complete.

One test per endpoint x principal: the status and, for errors, the error code; a success that
writes leaves its object and exactly its audit event behind with the chain intact; a refusal (and
every read) leaves the database as it found it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.db import transaction
from django.test import override_settings
from django.urls import resolve

from core.audit_models import AuditEvent
from portal.audit_verify import verify_chain
from tests.api.matrix import (
    API_PREFIX,
    AUDITED_READS,
    CELLS,
    DERIVED_COLUMNS,
    ENDPOINTS,
    HTTP_METHODS,
    LIST_KEYS,
    LIST_VISIBILITY,
    ROLE_COLUMNS,
    SSO_PROVIDERS,
    TOKEN_COLUMNS,
    Endpoint,
    api_routes,
    endpoint_by_key,
    fill,
)
from tests.api.matrix_world import State, build_state, client_for, fingerprint, route_params
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db(transaction=False)

AUTH_TOKEN = ("POST", "auth/token/")
# POST /auth/token/ trades a password for a token, so its principals are credentials, not clients.
#   case: (body, status, error code, audit action appended)
AUTH_TOKEN_CASES: dict[str, tuple[dict[str, Any], int, str | None, str | None]] = {
    "owner-unbound": (
        {"username": "alice", "password": PASSWORD, "scopes": ["read"]},
        201,
        None,
        "token.create",
    ),
    "owner-bound-own-tenant": (
        {"username": "alice", "password": PASSWORD, "scopes": ["write"], "tenant": "acme"},
        201,
        None,
        "token.create",
    ),
    "bound-to-another-tenant": (
        {"username": "alice", "password": PASSWORD, "scopes": ["read"], "tenant": "globex"},
        404,
        "tenant.not_found",
        None,
    ),
    "wrong-password": (
        {"username": "alice", "password": "nope", "scopes": ["read"]},
        401,
        "auth.invalid_credentials",
        "auth.login_failed",
    ),
    "unknown-user": (
        {"username": "mallory", "password": PASSWORD, "scopes": ["read"]},
        401,
        "auth.invalid_credentials",
        "auth.login_failed",
    ),
    "unknown-scope": (
        {"username": "alice", "password": PASSWORD, "scopes": ["root"]},
        400,
        "invalid_request",
        None,
    ),
}


def _cases() -> list[Any]:
    cases = []
    for endpoint in ENDPOINTS:
        for column in (*ROLE_COLUMNS, *DERIVED_COLUMNS, *TOKEN_COLUMNS):
            if endpoint.expected(column) is not None:
                marks = [pytest.mark.s3] if endpoint.s3 else []
                case_id = f"{endpoint.method} {endpoint.route} {column}"
                cases.append(pytest.param(endpoint, column, id=case_id, marks=marks))
    return cases


@pytest.fixture(scope="module")
def matrix_state(django_db_setup, django_db_blocker, tmp_path_factory):
    """Built once per module inside a transaction; each test runs in a savepoint of it (the `db`
    fixture), so every case starts from the same world and nothing leaks between cases."""
    root = tmp_path_factory.mktemp("matrix")
    storage = {
        "ADAPTER_STORAGE_BACKEND": "local",
        "ADAPTER_STORAGE_ROOT": str(root / "storage"),
        "OIDC_PROVIDERS": SSO_PROVIDERS,
        # The matrix's webhook lives on loopback (nothing is posted to it).
        "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": True,
    }
    with django_db_blocker.unblock(), override_settings(**storage), transaction.atomic():
        built = build_state(root)
        yield built
        built.close()
        transaction.set_rollback(True)


@pytest.fixture
def state(matrix_state, db) -> Iterator[State]:
    yield matrix_state
    matrix_state.close()
    matrix_state.direct_upload_id, matrix_state.direct_parts = "0" * 32, []


def _use_s3(request: Any) -> None:
    """Point the portal at the moto S3 server's fresh bucket for this case."""
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_storage").bucket
    settings = request.getfixturevalue("settings")
    settings.ADAPTER_STORAGE_BACKEND = "s3"
    settings.S3_BUCKET = bucket
    settings.S3_ENDPOINT_URL = server.endpoint_url
    settings.S3_REGION = server.region
    settings.S3_ACCESS_KEY_ID = server.access_key_id
    settings.S3_SECRET_ACCESS_KEY = server.secret_access_key


@pytest.mark.parametrize(("endpoint", "column"), _cases())
def test_permission_matrix(request, state, endpoint: Endpoint, column: str) -> None:
    expected = endpoint.expected(column)
    assert expected is not None, "_cases() leaves out the cells marked '-'"
    status, code = expected
    if endpoint.s3:
        _use_s3(request)
    if endpoint.setup is not None:
        endpoint.setup(state)
    client = client_for(state, endpoint, column)
    url = API_PREFIX + fill(endpoint.route, route_params(state, endpoint, column))
    body = endpoint.body(state) if callable(endpoint.body) else endpoint.body
    fmt = "multipart" if endpoint.multipart else "json"
    before, last_event = (
        fingerprint(),
        AuditEvent.objects.order_by("-id").values_list("id", flat=True).first(),
    )

    call = getattr(client, endpoint.method.lower())
    response = call(url, body, format=fmt) if body is not None else call(url)

    streamed = getattr(response, "streaming", False)  # the audit export: no JSON on success
    payload = response.json() if not streamed and response.content else None
    assert response.status_code == status, f"{column} {endpoint.method} {url}: {payload}"
    if code is not None:
        assert payload is not None
        assert payload["error"]["code"] == code, payload
        assert payload["error"]["message"]
    new_events = list(
        AuditEvent.objects.filter(id__gt=last_event or 0).values_list("action", flat=True)
    )
    if code is None and endpoint.method != "GET":
        assert endpoint.audit in new_events, f"no {endpoint.audit} event; got {new_events}"
        assert endpoint.then is not None
        endpoint.then(state, response)
        report = verify_chain()
        assert report.ok, report.as_dict()
    elif code is None and endpoint.audit is not None:  # an export: audited, changes nothing else
        assert new_events == [endpoint.audit], new_events
        after = fingerprint()
        assert after.pop("audit")[:-1] == before.pop("audit") and after == before
    else:
        assert new_events == [], f"{'a read' if code is None else 'a refusal'} wrote {new_events}"
        assert fingerprint() == before


@pytest.mark.parametrize(
    ("route", "column"),
    [(route, column) for route in sorted(LIST_VISIBILITY) for column in LIST_VISIBILITY[route]],
)
def test_lists_show_each_principal_only_its_rows(state, route: str, column: str) -> None:
    expected = LIST_VISIBILITY[route][column]
    endpoint = endpoint_by_key()[("GET", route)]
    client = client_for(state, endpoint, column)
    response = client.get(
        API_PREFIX + fill(route, route_params(state, endpoint, column)), {"page_size": 200}
    )
    assert response.status_code == 200, response.json()
    assert {LIST_KEYS[route](row) for row in response.json()["results"]} == expected


@pytest.mark.parametrize("case", sorted(AUTH_TOKEN_CASES))
def test_auth_token_matrix(state, case: str) -> None:
    cache.delete_many([f"throttle_login_{ip}" for ip in ("127.0.0.1", "")])
    body, status, code, audit = AUTH_TOKEN_CASES[case]
    # Credentials in the body decide; a revoked bearer token alongside changes nothing.
    client = client_for(state, endpoint_by_key()[("GET", "tenants/")], "rvk")
    before = fingerprint()
    last_event = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()
    response = client.post(API_PREFIX + AUTH_TOKEN[1], body, format="json")
    assert response.status_code == status, response.json()
    new_events = list(AuditEvent.objects.filter(id__gt=last_event).values_list("action", flat=True))
    if code is not None:
        assert response.json()["error"]["code"] == code
        assert new_events == ([audit] if audit else [])
        assert {k: v for k, v in fingerprint().items() if k != "audit"} == {
            k: v for k, v in before.items() if k != "audit"
        }
    else:
        token = response.json()["token"]
        assert token.startswith("lp_") and new_events == [audit]
        assert response.json()["tenant"] == body.get("tenant")


# --- meta-tests: the matrix covers the API, and only the API ---


def test_every_api_route_and_method_is_in_the_matrix() -> None:
    declared = {e.key for e in ENDPOINTS} | {AUTH_TOKEN}
    routed = set(api_routes())
    missing = sorted(routed - declared)
    assert not missing, f"endpoints with no row in tests/api/matrix.py: {missing}"
    stale = sorted(declared - routed)
    assert not stale, f"rows in tests/api/matrix.py for endpoints that no longer exist: {stale}"


def test_format_suffix_routes_are_the_same_views_as_their_matrix_rows() -> None:
    canonical = api_routes()
    for (method, route), view in api_routes(include_format_suffixes=True).items():
        if "{format}" not in route:
            continue
        plain = route.replace(".{format}/?", "/").replace(".{format}", "/")
        assert (method, plain) in canonical, f"{method} {route} has no canonical route {plain}"
        assert getattr(view, "cls", None) is getattr(canonical[(method, plain)], "cls", None)
        assert getattr(view, "actions", None) == getattr(
            canonical[(method, plain)], "actions", None
        )


def test_every_row_is_complete_and_uses_known_cells() -> None:
    for endpoint in ENDPOINTS:
        for column, cell in endpoint.cells.items():
            assert cell in ("ok", "-") or cell in CELLS, f"{endpoint.key}: unknown cell {cell!r}"
            if column == "gno":
                assert (cell == "-") == ("{adapter}" not in endpoint.route), endpoint.key
        writes = endpoint.method != "GET"
        exports = endpoint.route in AUDITED_READS  # reads that are audited (data leaving)
        assert (endpoint.audit is not None) == (writes or exports), (
            f"{endpoint.key}: writes (and exports) must name their audit event"
        )
        assert (endpoint.then is not None) == writes, (
            f"{endpoint.key}: writes must check their effect"
        )


def test_methods_no_row_declares_fail_closed(state) -> None:
    """Every method a route does not map answers 401/403/404/405 and changes nothing."""
    declared = endpoint_by_key()
    routes = {route for _, route in declared} | {AUTH_TOKEN[1]}
    for route in sorted(routes):
        url = API_PREFIX + fill(route, route_params(state, ENDPOINTS[0], "own"))
        view = resolve(url).func
        for method in HTTP_METHODS:
            if (method, route) in declared or (method, route) == AUTH_TOKEN:
                continue
            for who in ("anon", "own", "adm"):
                client = client_for(state, ENDPOINTS[0], who)
                before = fingerprint()
                response = getattr(client, method.lower())(url, {}, format="json")
                assert response.status_code in (401, 403, 404, 405), (method, url, who, view)
                assert "error" in response.json(), (method, url, who)
                assert fingerprint() == before, (method, url, who)

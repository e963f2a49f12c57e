"""A body that is not a JSON object is a 400 on every write of the API, never a 500.

`PUT /api/v1/cost/settings/` with `[null, null]` was a 500 (AttributeError; found by
schemathesis): the view read fields off a list. Every write operation of /api/schema/ gets a
list, a string, a number and null for a body, and one nested 100,000 deep, as a platform admin
who owns the tenant (so access never answers first), on a seeded tenant, adapter, version,
alias and engine: each is a 400 with its code. core/api/parsers.py refuses them for every view.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from tenants.models import Membership, TokenScope
from tenants.services.tokens import token_issue
from tests.gateway.recording import engine_row, version

pytestmark = pytest.mark.django_db

WRITES = ("post", "put", "patch", "delete")
NOT_OBJECTS = {
    "a list": b"[null, null]",
    "a string": b'"x"',
    "a number": b"1",
    "null": b"null",
}
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture
def api(world) -> Any:
    """A client with every scope as adam (platform admin, and owner of acme), and what the
    path parameters name."""
    adam = world.users["adam"]
    Membership.objects.create(user=adam, tenant=world.acme, role="owner")
    alice = AccessContext.for_user(world.users["alice"])
    version(world.support, 1)
    alias_set(
        access=alice,
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    engine = engine_row(world, "engine-a", "shared")
    other = token_issue(access=alice, scopes=["read"], tenant=world.acme).token
    client = world.token_client("adam", scopes=list(TokenScope.values))
    client.parameters = {
        "tenant": world.acme.slug,
        "adapter": world.support.name,
        "number": "1",
        "alias": "support-bot",
        "engine": engine.name,
        "username": "bob",
        "prefix": other.prefix,
        "name": world.base.name,
        # Objects no write reaches before its body is read: any value will do.
        "raise_request": "1",
        "budget": "1",
        "upload": "0" * 32,
        "mapping": "1",
        "email": "ops@example.com",
        "notification": "1",
        "key": "k",
        "webhook": "1",
        "plan": "1",
    }
    return client


def writes(client: Any) -> list[tuple[str, str, bool]]:
    """(method, path, whether it takes JSON) of every write operation of the schema, with its
    path parameters filled; an operation that declares no body takes JSON (it reads none)."""
    schema = client.get("/api/schema/", {"format": "json"})
    assert schema.status_code == 200
    found = []
    for template, item in json.loads(schema.content)["paths"].items():
        for method, operation in item.items():
            if method not in WRITES:
                continue
            content = (operation.get("requestBody") or {}).get("content", {})
            path = template
            for name, value in client.parameters.items():
                path = path.replace("{" + name + "}", value)
            assert "{" not in path, f"no value for a parameter of {template}"
            found.append((method, path, not content or "application/json" in content))
    return found


def refusals(client: Any, body: bytes, code: str) -> list[tuple]:
    """Every write that does not answer 400 `code` to `body` (or 415, where its operation
    declares a body but not JSON: an upload's multipart)."""
    found = writes(client)
    assert len(found) > 50, found  # the walk reached the whole API
    wrong = []
    for method, path, takes_json in found:
        response = getattr(client, method)(path, body, content_type="application/json")
        error = response.json().get("error", {}) if response.content else {}
        expected = {(400, code)} if takes_json else {(400, code), (415, "unsupported_media_type")}
        if (response.status_code, error.get("code")) not in expected:
            wrong.append((method.upper(), path, response.status_code, error))
    return wrong


@pytest.mark.parametrize("kind", NOT_OBJECTS)
def test_every_write_answers_400_to_a_body_that_is_not_an_object(api, kind):
    assert refusals(api, NOT_OBJECTS[kind], "body.not_object") == []


def test_every_write_answers_400_to_a_body_nested_too_deep(api):
    assert refusals(api, DEEP, "body.too_deep") == []


def test_the_cost_settings_answer_what_was_wrong_and_change_nothing(api):
    from gateway.cost import cost_settings

    before = cost_settings().price_per_engine_hour
    response = api.put("/api/v1/cost/settings/", b"[null, null]", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "body.not_object",
        "message": "The body must be a JSON object ({...} with named fields), not a list.",
    }
    assert cost_settings().price_per_engine_hour == before
    fine = api.put(
        "/api/v1/cost/settings/", {"price_per_engine_hour": "2.5"}, content_type="application/json"
    )
    assert fine.status_code == 200, fine.json()


def test_every_view_that_lists_its_parsers_reads_json_as_an_object():
    """A view that names DRF's JSONParser would take lists again: only the API's own parser."""
    from rest_framework.parsers import JSONParser

    from core.api.parsers import JsonObjectParser
    from tests.api.test_no_server_errors import api_views

    views = api_views()
    assert views
    own = [
        (view.__name__, parser.__name__)
        for view in views
        for parser in getattr(view, "parser_classes", ())
        if issubclass(parser, JSONParser) and not issubclass(parser, JsonObjectParser)
    ]
    assert own == []

"""No operation of the API answers a server error.

Schemathesis over the whole of /api/schema/, in process (Django's WSGI handler), as a platform
admin, on a seeded world: tenants (acme, globex) and their people, an adapter with an active
version, an alias, an engine, a second token. The coverage phase for every operation without a
body (boundary, wrong and missing values, and each method its path lacks: OPTIONS, TRACE...) and
a few fuzzed cases for every operation, with a fixed seed, derandomized: the same cases on every
run. Any 5xx fails.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from schemathesis.config import SchemathesisConfig

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from tenants.models import TokenScope
from tenants.services.tokens import token_issue
from tests.gateway.recording import engine_row, version

# Fuzzed cases per operation, on top of the coverage phase's (1,457 cases in all; about 50 s of
# CPU for the whole run, measured 2026-12-04): valid and invalid bodies, few enough for the
# suite's budget.
FUZZED_PER_OPERATION = 3
SEED = 32


@pytest.fixture
def api_schema(transactional_db, world, request) -> Any:
    # schemathesis 4.32's lazy loader renames the test per operation through `_nodeid`, which
    # pytest 9 no longer has (it reads it before setting it): give it the id to start from.
    request.node._nodeid = request.node.nodeid
    admin = AccessContext.for_user(world.users["adam"])
    token = token_issue(access=admin, scopes=list(TokenScope.values), tenant=None).plaintext
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
    config = SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "generation": {
                "deterministic": True,
                "database": "none",
                "max-examples": FUZZED_PER_OPERATION,
            },
            "phases": {
                "examples": {"enabled": False},
                "coverage": {"enabled": True},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},
            },
            # Bodies multiply the coverage phase's cases (sets per field: 3,393 cases, 130 s of
            # CPU with their valid cases alone): operations that take one are fuzzed only; every
            # other operation gets the coverage phase whole (boundary, wrong and missing values,
            # and each method its path lacks: OPTIONS, TRACE...).
            "operations": [
                {
                    "include-method": ["POST", "PUT", "PATCH"],
                    "phases": {"coverage": {"enabled": False}},
                }
            ],
            "headers": {"Authorization": f"Bearer {token}"},
            # Path parameters name the seeded objects, so operations reach their handlers.
            "parameters": {
                "tenant": world.acme.slug,
                "adapter": world.support.name,
                "number": 1,
                "alias": "support-bot",
                "engine": engine.name,
                "username": "bob",
                "prefix": other.prefix,
                "name": world.base.name,
            },
        }
    )
    return schemathesis.openapi.from_wsgi(
        "/api/schema/",
        get_wsgi_application(),
        config=config,
        headers={"Authorization": f"Bearer {token}"},
    )


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
def test_no_operation_answers_a_server_error(case):
    response = case.call()
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} {case.query or ''} -> {response.status_code}: "
        f"{response.text[:500]}"
    )


def api_views() -> list[type]:
    from importlib import import_module

    from django.urls import URLPattern, URLResolver

    found: list[type] = []

    def walk(patterns: list) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                view = getattr(pattern.callback, "cls", None)
                if view is not None and view not in found:
                    found.append(view)

    walk(import_module("portal.api.urls").urlpatterns)
    return found


def test_every_view_with_a_format_of_its_own_answers_the_rest_in_json():
    """The family of the bug above: a renderer of its own serves only the action it was made
    for (core.api.formats); any other answer of the view, whatever the method, is JSON."""
    from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer

    from core.api.formats import FormattedActions

    own_format = [
        view
        for view in api_views()
        if any(
            not issubclass(r, JSONRenderer | BrowsableAPIRenderer)
            for r in getattr(view, "renderer_classes", ())
        )
    ]
    assert own_format, "no view with a format of its own: the check checks nothing"
    assert [v.__name__ for v in own_format if not issubclass(v, FormattedActions)] == []

"""Every page route, how to fill its URL, and who gets what.

`test_routes_meta` fails when the URL resolver has a page that is missing here. `expect` maps a
persona (tests/factories.py) to the status it must get: 404 for another tenant's objects, 403 for
a role without the right, 200 (or 302 after a POST) when allowed. Anonymous is always sent to login.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.pages.builders import PagesWorld

Kwargs = Callable[[PagesWorld], dict[str, Any]]


def _none(pw: PagesWorld) -> dict[str, Any]:
    return {}


def _acme(pw: PagesWorld) -> dict[str, Any]:
    return {"tenant": "acme"}


def _support(pw: PagesWorld) -> dict[str, Any]:
    return {"tenant": "acme", "adapter": "support"}


def _validated(pw: PagesWorld) -> dict[str, Any]:
    return {"tenant": "acme", "adapter": "support", "number": pw.validated.number}


def _active(pw: PagesWorld) -> dict[str, Any]:
    return {"tenant": "acme", "adapter": "support", "number": pw.active.number}


FLEET_ENGINE = "pages-1"


def _fleet_engine(pw: PagesWorld) -> dict[str, Any]:
    """An engine of the world's base model in the default pool (the pages world has none)."""
    from workers.models import Engine

    Engine.objects.get_or_create(
        name=FLEET_ENGINE,
        defaults={
            "base_model": pw.world.base,
            "url": "http://127.0.0.1:9",
            "served_model_name": "tiny",
            "adapter_root": "/srv/adapters",
            "state": "up",
        },
    )
    return {"engine": FLEET_ENGINE}


def _fleet_verb(verb: str) -> Kwargs:
    return lambda pw: {**_fleet_engine(pw), "verb": verb}


# Operators and platform admins only; everyone else 403 before any lookup.
NOT_FLEET = {"alice": 403, "bob": 403, "vera": 403, "charlie": 403, "rita": 403, "nora": 403}
ACTIVE_LABEL = {"version": "acme/support@2"}


@dataclass(frozen=True)
class PageRoute:
    name: str
    kwargs: Kwargs
    method: str = "get"
    expect: dict[str, int] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.method}:{self.name}"


PAGE_ROUTES: list[PageRoute] = [
    PageRoute("dashboard", _none, expect={"nora": 200, "alice": 200}),
    PageRoute("tokens", _none, expect={"nora": 200, "alice": 200}),
    PageRoute(
        "tokens",
        _none,
        "post",
        expect={"nora": 200},
        data={"scopes": ["read"], "expires_in_days": "7"},
    ),
    PageRoute(
        "token-revoke",
        lambda pw: {"token_id": pw.token.token.pk},
        "post",
        expect={"bob": 404, "charlie": 404, "alice": 302},
    ),
    PageRoute(
        "review-queue",
        _none,
        expect={"alice": 403, "nora": 403, "adam": 403, "olga": 403, "rita": 200},
    ),
    PageRoute(
        "review-approve",
        _validated,
        "post",
        expect={"charlie": 404, "nora": 404, "alice": 403, "vera": 403, "rob": 302},
    ),
    PageRoute(
        "review-reject",
        _validated,
        "post",
        data={"reason": "not ours"},
        expect={"charlie": 404, "nora": 404, "alice": 403, "bob": 403, "rob": 302},
    ),
    PageRoute(
        "audit",
        _none,
        expect={"bob": 403, "vera": 403, "nora": 403, "rita": 403, "alice": 200, "adam": 200},
    ),
    PageRoute("audit-verify", _none, expect={"alice": 403, "rita": 403, "nora": 403, "adam": 200}),
    PageRoute(
        "tenant-adapters", _acme, expect={"charlie": 404, "nora": 404, "vera": 200, "rita": 200}
    ),
    PageRoute("adapter-detail", _support, expect={"charlie": 404, "nora": 404, "vera": 200}),
    PageRoute("version-detail", _active, expect={"charlie": 404, "nora": 404, "vera": 200}),
    PageRoute(
        "version-upload",
        _support,
        expect={"charlie": 404, "nora": 404, "vera": 403, "rita": 403, "bob": 200},
    ),
    PageRoute("version-upload", _support, "post", expect={"charlie": 404, "vera": 403}),
    PageRoute(
        "version-release", _validated, "post", expect={"charlie": 404, "bob": 403, "vera": 403}
    ),
    PageRoute(
        "version-disable",
        _active,
        "post",
        expect={"charlie": 404, "nora": 404, "bob": 403, "vera": 403, "alice": 302},
    ),
    PageRoute("tenant-aliases", _acme, expect={"charlie": 404, "nora": 404, "vera": 200}),
    # Maintainers and owners; a viewer or a platform role sees the tenant but has nothing to try.
    PageRoute(
        "tenant-playground",
        _acme,
        expect={
            "charlie": 404,
            "nora": 404,
            "olga": 404,
            "vera": 403,
            "rita": 403,
            "adam": 403,
            "bob": 200,
            "alice": 200,
        },
    ),
    PageRoute(
        "tenant-aliases",
        _acme,
        "post",
        data={"name": "x", "version_0": "support@2", "weight_0": "100"},
        expect={"charlie": 404, "vera": 403, "bob": 302},
    ),
    PageRoute(
        "alias-delete",
        lambda pw: {"tenant": "acme", "alias": pw.alias.name},
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 302},
    ),
    PageRoute("fleet-engines", _none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute("fleet-engine", _fleet_engine, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute("fleet-alarm-banner", _none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute(
        "fleet-version-act",
        _fleet_verb("pin"),
        "post",
        data=ACTIVE_LABEL,
        expect={**NOT_FLEET, "olga": 302, "adam": 302},
    ),
    PageRoute(
        "fleet-version-act",
        _fleet_verb("warm"),
        "post",
        data=ACTIVE_LABEL,
        expect={"alice": 403, "bob": 403, "olga": 302},
    ),
    # Refused by the service (not pinned / not on the engine): the operator reached it.
    PageRoute(
        "fleet-version-act",
        _fleet_verb("unpin"),
        "post",
        data=ACTIVE_LABEL,
        expect={"alice": 403, "charlie": 403, "olga": 409},
    ),
    PageRoute(
        "fleet-version-act",
        _fleet_verb("evict"),
        "post",
        data=ACTIVE_LABEL,
        expect={"alice": 403, "vera": 403, "olga": 409},
    ),
    PageRoute(
        "fleet-engine-state",
        _fleet_verb("drain"),
        "post",
        expect={**NOT_FLEET, "olga": 302, "adam": 302},
    ),
    PageRoute(
        "fleet-engine-state",
        _fleet_verb("undrain"),
        "post",
        expect={"alice": 403, "nora": 403, "olga": 409},
    ),
    PageRoute(
        "fleet-engine-reconcile",
        _fleet_engine,
        "post",
        expect={**NOT_FLEET, "olga": 302, "adam": 302},
    ),
]

# Names on the resolver that are not pages of this matrix: auth views, health, the API's docs.
NOT_PAGES = {"healthz", "login", "logout", "api-schema", "api-docs", "metrics"}

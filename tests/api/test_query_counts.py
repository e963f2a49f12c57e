"""List endpoints make as many queries for 50 rows as for 5: an N+1 shows up here as a failure.

Each case grows its list from 5 to 50 rows (one page) between two identical requests and compares
the queries each one ran. A ceiling catches a constant but wasteful count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from guardian.shortcuts import assign_perm

from adapters.models import Adapter, AdapterVersion, Alias, AliasTarget, BaseModel
from core.audit import record_event
from tenants.models import ApiToken, Membership, Tenant
from tests.factories import World
from workers.models import Engine, Residency

pytestmark = pytest.mark.django_db(transaction=False)
User = get_user_model()
CEILING = 15


def _tenants(world: World, start: int, stop: int) -> None:
    Tenant.objects.bulk_create(Tenant(slug=f"t{i}", name=f"T{i}") for i in range(start, stop))


def _alice_joins(world: World, start: int, stop: int) -> None:
    tenants = Tenant.objects.bulk_create(
        Tenant(slug=f"j{i}", name=f"J{i}") for i in range(start, stop)
    )
    Membership.objects.bulk_create(
        Membership(user=world.users["alice"], tenant=t, role="viewer") for t in tenants
    )


def _adapters(world: World, start: int, stop: int, tenant: Tenant | None = None) -> list[Adapter]:
    tenant = tenant or world.acme
    adapters = Adapter.objects.bulk_create(
        Adapter(tenant=tenant, name=f"a{i}", base_model=world.base) for i in range(start, stop)
    )
    _versions(world, 0, 2, adapters=adapters)
    return adapters


def _versions(world: World, start: int, stop: int, adapters: list[Adapter] | None = None) -> None:
    adapters = adapters or [world.support]
    uploader = world.users["bob"]
    AdapterVersion.objects.bulk_create(
        AdapterVersion(
            tenant_id=a.tenant_id,
            adapter=a,
            number=n + 1,
            status="validated",
            served_name=f"{a.tenant_id}-{a.name}-v{n + 1}",
            uploaded_by=uploader,
        )
        for a in adapters
        for n in range(start, stop)
    )


def _queue(world: World, start: int, stop: int) -> None:
    """One version in each of `stop - start` new tenants (so tenant joins are exercised)."""
    for i in range(start, stop):
        tenant = Tenant.objects.create(slug=f"q{i}", name=f"Q{i}")
        _adapters(world, 0, 1, tenant=tenant)


def _granted_queue(world: World, start: int, stop: int) -> None:
    """nora holds a grant in every new tenant: her queue spans many grant-only tenants."""
    for i in range(start, stop):
        tenant = Tenant.objects.create(slug=f"g{i}", name=f"G{i}")
        for adapter in _adapters(world, 0, 1, tenant=tenant):
            assign_perm("view_adapter", world.users["nora"], adapter)


def _granted_adapters(world: World, start: int, stop: int) -> None:
    for adapter in _adapters(world, start, stop):
        assign_perm("view_adapter", world.users["nora"], adapter)


def _aliases(world: World, start: int, stop: int) -> None:
    versions = list(AdapterVersion.objects.filter(adapter=world.support).order_by("number"))
    if not versions:
        _versions(world, 0, 2)
        versions = list(AdapterVersion.objects.filter(adapter=world.support).order_by("number"))
    aliases = Alias.objects.bulk_create(
        Alias(tenant=world.acme, name=f"al{i}") for i in range(start, stop)
    )
    AliasTarget.objects.bulk_create(
        AliasTarget(alias=alias, version=v, weight=50) for alias in aliases for v in versions[:2]
    )


def _members(world: World, start: int, stop: int) -> None:
    users = User.objects.bulk_create(User(username=f"m{i}") for i in range(start, stop))
    Membership.objects.bulk_create(
        Membership(user=u, tenant=world.acme, role="viewer") for u in users
    )


def _users(world: World, start: int, stop: int) -> None:
    users = User.objects.bulk_create(User(username=f"u{i}") for i in range(start, stop))
    for user in users:
        user.groups.add(*world.users["rita"].groups.all())


def _tokens(world: World, start: int, stop: int) -> None:
    ApiToken.objects.bulk_create(
        ApiToken(
            user=world.users["bob"],
            tenant=world.acme,
            prefix=f"p{i:08d}",
            secret_hash="x",
            scopes=["read"],
        )
        for i in range(start, stop)
    )


def _audit(world: World, start: int, stop: int) -> None:
    for i in range(start, stop):
        record_event(
            action="test.event", actor=world.users["alice"], tenant=world.acme, object_id=str(i)
        )


def _base_models(world: World, start: int, stop: int) -> None:
    BaseModel.objects.bulk_create(
        BaseModel(name=f"bm{i}", source="x", architecture="llama") for i in range(start, stop)
    )


def _engines(world: World, start: int, stop: int) -> list[Engine]:
    return Engine.objects.bulk_create(
        Engine(
            name=f"e{i}",
            base_model=world.base,
            url=f"http://127.0.0.1:{9000 + i}",
            served_model_name="tiny",
            adapter_root="/srv",
        )
        for i in range(start, stop)
    )


def _residency(world: World, start: int, stop: int) -> None:
    engine = Engine.objects.filter(name="e0").first() or _engines(world, 0, 1)[0]
    adapters = _adapters(world, start, stop, tenant=world.globex)
    versions = AdapterVersion.objects.filter(adapter__in=adapters, number=1)
    Residency.objects.bulk_create(Residency(engine=engine, version=v) for v in versions)


@dataclass(frozen=True)
class ListCase:
    url: str
    who: str
    grow: Callable[[World, int, int], Any]
    token: bool = False  # ask with a bearer token instead of a session


CASES = {
    "tenants (admin)": ListCase("/api/v1/tenants/", "adam", _tenants),
    "tenants (member of many)": ListCase("/api/v1/tenants/", "alice", _alice_joins),
    "users": ListCase("/api/v1/users/", "adam", _users),
    "members": ListCase("/api/v1/tenants/acme/members/", "alice", _members),
    "tokens (owner)": ListCase("/api/v1/tenants/acme/tokens/", "alice", _tokens),
    "tokens (by token)": ListCase("/api/v1/tenants/acme/tokens/", "alice", _tokens, token=True),
    "adapters (member)": ListCase("/api/v1/tenants/acme/adapters/", "alice", _adapters),
    "adapters (grantee)": ListCase("/api/v1/tenants/acme/adapters/", "nora", _granted_adapters),
    "versions of an adapter": ListCase(
        "/api/v1/tenants/acme/adapters/support/versions/", "alice", _versions
    ),
    "version queue (reviewer)": ListCase("/api/v1/versions/?status=validated", "rita", _queue),
    "version queue (member)": ListCase(
        "/api/v1/versions/?tenant=acme", "alice", lambda w, a, b: _adapters(w, a, b)
    ),
    "version queue (grantee in many tenants)": ListCase(
        "/api/v1/versions/", "nora", _granted_queue
    ),
    "aliases": ListCase("/api/v1/tenants/acme/aliases/", "alice", _aliases),
    "audit (admin)": ListCase("/api/v1/audit/", "adam", _audit),
    "audit (owner)": ListCase("/api/v1/audit/?tenant=acme", "alice", _audit),
    "base models": ListCase("/api/v1/base-models/", "alice", _base_models),
    "engines": ListCase("/api/v1/engines/", "olga", _engines),
    "residency": ListCase("/api/v1/engines/e0/residency/", "olga", _residency),
}


def _count(client: Any, url: str) -> tuple[int, int, list[str]]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, {"page_size": 50})
    assert response.status_code == 200, response.json()
    return (
        response.json()["count"],
        len(ctx.captured_queries),
        [q["sql"] for q in ctx.captured_queries],
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_list_query_count_does_not_grow_with_rows(world, name: str) -> None:
    case = CASES[name]
    case.grow(world, 0, 5)
    client = world.token_client(case.who, ["read"]) if case.token else world.client(case.who)
    client.get(case.url)  # warm per-process caches (content types, permissions) once
    small_rows, small, _ = _count(client, case.url)
    case.grow(world, 5, 50)
    large_rows, large, sql = _count(client, case.url)
    assert large_rows >= small_rows + 45, (
        f"the list did not grow ({small_rows} -> {large_rows} rows)"
    )
    assert large == small, (
        f"{small} queries for {small_rows} rows, {large} for {large_rows}:\n" + "\n".join(sql)
    )
    assert large <= CEILING, "\n".join(sql)

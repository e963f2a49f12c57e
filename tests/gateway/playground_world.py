"""Versions in each playground-relevant state for acme (and one for globex), without files:
enough for the access rules and the socket's refusals, which never reach an engine."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.access import AccessContext
from adapters.models import Adapter, AdapterVersion
from tenants.services.tenancy import adapter_grant
from tests.factories import World


def make_version(adapter: Adapter, number: int, status: str) -> AdapterVersion:
    return AdapterVersion.objects.create(
        tenant=adapter.tenant,
        adapter=adapter,
        number=number,
        status=status,
        served_name=f"{adapter.tenant.slug}--{adapter.name}--v{number}-{number:08x}",
        rank=8,
    )


@dataclass
class PlaygroundWorld:
    """acme/support: v1 active, v2 staged, v3 validated; acme/other v1 active; globex/legal v1
    active. nora holds an upload grant on acme/support only; vic a view-only grant on it."""

    world: World
    active: AdapterVersion
    staged: AdapterVersion
    validated: AdapterVersion
    other: AdapterVersion
    foreign: AdapterVersion


def build_playground_world(world: World) -> PlaygroundWorld:
    from tests.factories import make_user

    other = Adapter.objects.create(tenant=world.acme, name="other", base_model=world.base)
    pw = PlaygroundWorld(
        world=world,
        active=make_version(world.support, 1, "active"),
        staged=make_version(world.support, 2, "staged"),
        validated=make_version(world.support, 3, "validated"),
        other=make_version(other, 1, "active"),
        foreign=make_version(world.legal, 1, "active"),
    )
    adapter_grant(
        access=AccessContext.for_user(world.users["alice"]),
        adapter=world.support,
        username="nora",
        perms=["upload_version"],
    )
    world.users["vic"] = make_user("vic")
    adapter_grant(
        access=AccessContext.for_user(world.users["alice"]),
        adapter=world.support,
        username="vic",
        perms=["view_adapter"],
    )
    return pw

"""Versions in each lifecycle state, made through the real services, for the page tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.test import Client

from adapters.access import AccessContext
from adapters.models import Adapter, AdapterVersion, Alias
from adapters.services.aliases import alias_set
from adapters.services.lifecycle import version_approve, version_release
from adapters.services.uploads import IncomingFile, version_upload
from adapters.services.validation import run_validation
from tenants.services.tokens import IssuedToken, token_issue
from tests.factories import World, adapter_files


def client_for(world: World, who: str | None) -> Client:
    client = Client()
    if who is not None:
        client.force_login(world.users[who])
    return client


def upload_files(world: World, who: str, adapter: Adapter, directory: Path) -> AdapterVersion:
    access = AccessContext.for_user(world.users[who])
    cfg, model = directory / "adapter_config.json", directory / "adapter_model.safetensors"
    with open(cfg, "rb") as c, open(model, "rb") as m:
        return version_upload(
            access=access,
            adapter=adapter,
            config=IncomingFile(c, cfg.stat().st_size),
            model=IncomingFile(m, model.stat().st_size),
        )


def validated(
    world: World, who: str, adapter: Adapter, tmp: Path, *, seed: int = 1, **kw: Any
) -> AdapterVersion:
    """Uploaded, then checked by the real validator (which moves it to validated or rejected)."""
    version = upload_files(
        world, who, adapter, adapter_files(tmp / f"{adapter.name}-{seed}", seed=seed, **kw)
    )
    run_validation(version_id=version.pk)
    return AdapterVersion.objects.get(pk=version.pk)


def staged(world: World, version: AdapterVersion, reviewer: str = "rita") -> AdapterVersion:
    return version_approve(
        version=version, access=AccessContext.for_user(world.users[reviewer]), comment="looks right"
    )


def active(world: World, version: AdapterVersion, owner: str = "alice") -> AdapterVersion:
    return version_release(
        version=staged(world, version), access=AccessContext.for_user(world.users[owner])
    )


@dataclass
class PagesWorld:
    """acme/support v1 validated (by bob) and v2 active; alias acme/prod -> support@2;
    globex/legal v1 validated (by charlie); one token of alice's."""

    world: World
    validated: AdapterVersion
    active: AdapterVersion
    foreign: AdapterVersion
    alias: Alias
    token: IssuedToken

    def client(self, who: str | None) -> Client:
        return client_for(self.world, who)


def build_pages_world(world: World, tmp: Path) -> PagesWorld:
    from django.contrib.auth import get_user_model

    from tests.factories import PASSWORD

    world.users["sue"] = get_user_model().objects.create_superuser("sue", password=PASSWORD)
    v1 = validated(world, "bob", world.support, tmp, seed=1)
    v2 = active(world, validated(world, "bob", world.support, tmp, seed=2))
    foreign = validated(world, "charlie", world.legal, tmp, seed=3)
    assert (v1.status, v2.status, foreign.status) == ("validated", "active", "validated")
    alias = alias_set(
        access=AccessContext.for_user(world.users["alice"]),
        tenant=world.acme,
        name="prod",
        targets=[{"version": "support@2", "weight": 100}],
    )
    token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["read"], name="ci"
    )
    return PagesWorld(
        world=world, validated=v1, active=v2, foreign=foreign, alias=alias, token=token
    )

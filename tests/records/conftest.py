"""A version with a history: uploaded, validated, approved, released behind an alias, served on
two days; each step audited through the real chain writer."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from adapters.models import AdapterVersion, Alias, AliasRevision, Decision
from core.audit import record_event
from gateway.models import DailyUsage
from tests.factories import make_user
from tests.gateway.recording import engine_row
from workers.models import FleetAction, Residency


@pytest.fixture
def history(world):
    alice, rita = world.users["alice"], world.users["rita"]
    world.users["aude"] = make_user("aude", roles=("auditor",))
    version = AdapterVersion.objects.create(
        tenant=world.acme,
        adapter=world.support,
        number=3,
        status="active",
        served_name="acme--support--v3-1f2e3d4c",
        manifest=[{"name": "adapter_model.safetensors", "size": 10, "sha256": "ab" * 32}],
        manifest_sha256="cd" * 32,
        rank=8,
        alpha=16.0,
        target_modules=["q_proj", "v_proj"],
        validation_report={
            "valid": True,
            "errors": [],
            "checks": [{"name": "files.set", "outcome": "passed", "codes": []}],
        },
        uploaded_by=world.users["bob"],
    )
    steps = [
        ("version.upload", world.users["bob"], None, {"status": "uploaded"}),
        ("version.validate", "validator", {"status": "uploaded"}, {"status": "validated"}),
        ("version.approve", rita, {"status": "validated"}, {"status": "staged"}),
        ("version.release", alice, {"status": "staged"}, {"status": "active"}),
    ]
    for action, actor, before, after in steps:
        record_event(
            action=action, actor=actor, tenant=world.acme, obj=version, before=before, after=after
        )
    # Another tenant's event in between: it must not leak into acme's record.
    record_event(
        action="adapter.update", actor=world.users["charlie"], tenant=world.globex, obj=world.legal
    )
    Decision.objects.create(
        tenant=world.acme,
        version=version,
        kind="approve",
        actor=rita,
        comment="looks fine",
        evidence={"valid": True},
    )
    Decision.objects.create(tenant=world.acme, version=version, kind="release", actor=alice)
    alias = Alias.objects.create(tenant=world.acme, name="support-bot")
    AliasRevision.objects.create(
        alias=alias,
        number=1,
        action="set",
        actor=alice,
        actor_label="alice",
        targets=[{"version": "support@3", "version_id": version.id, "weight": 100}],
    )
    record_event(
        action="alias.set",
        actor=alice,
        tenant=world.acme,
        obj=alias,
        after={"targets": ["support@3"]},
    )
    engine = engine_row(world, "gpu-1", "shared")
    FleetAction.objects.create(engine=engine, version=version, kind="load", served_name="x")
    Residency.objects.create(engine=engine, version=version, observed_state="resident_gpu")
    today = timezone.now().date()
    for day, requests in ((today - timedelta(days=1), 40), (today, 2)):
        DailyUsage.objects.create(
            tenant=world.acme,
            version=version,
            day=day,
            requests=requests,
            prompt_tokens=requests * 10,
            completion_tokens=requests * 5,
            slot_seconds=requests * 0.5,
        )
    return SimpleNamespace(world=world, version=version, alias=alias, url=evidence_url(version))


def evidence_url(version) -> str:
    return (
        f"/api/v1/tenants/{version.tenant.slug}/adapters/{version.adapter.name}"
        f"/versions/{version.number}/evidence/"
    )

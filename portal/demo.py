"""The demo world `make run` seeds: two tenants, a user per role, the tiny model, an engine,
and a few adapters uploaded through the real upload path; then the eval gate and a release plan
(portal.demo_release). Idempotent."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from adapters.access import AccessContext, SystemAccess
from adapters.models import Adapter, BaseModel
from adapters.services.registry import adapter_create, base_model_register
from adapters.services.uploads import IncomingFile, version_upload
from portal.demo_release import seed_demo_release
from tenants.models import Membership, Tenant
from workers.models import Engine, EngineState

User = get_user_model()

DEMO_USERS = {
    # username: (platform roles, {tenant: role})
    "admin": (("platform-admin",), {}),
    "alice": ((), {"acme": "owner"}),
    "bob": ((), {"acme": "maintainer"}),
    "vera": ((), {"acme": "viewer"}),
    "charlie": ((), {"globex": "owner"}),
    "rita": (("reviewer",), {}),
    "olga": (("operator",), {}),
    "aude": (("auditor",), {}),
}
# What the demo prices an engine-hour at (a GPU engine's order of magnitude; platform admins
# change it on the cost page). Set once, by the demo's admin, audited like any change.
DEMO_PRICE_PER_ENGINE_HOUR = "2.50"
DEMO_TENANTS = {"acme": ("Acme Corp", "gold"), "globex": ("Globex", "silver")}
# adapter (tenant, name) -> sample adapter directory name written by engine.tiny_model
DEMO_ADAPTERS = {
    ("acme", "support"): "sample-r8",
    ("acme", "code-style"): "sample-r16",
    ("globex", "legal"): "sample-r32",
}


@dataclass
class DemoResult:
    password: str
    users: list[str]
    uploaded: list[str]
    released: str = ""
    release: list[str] = field(default_factory=list)  # the eval gate and release plan seeded
    inference_token: str = ""
    sso: bool = False  # the demo identity provider's mappings are in


def seed_demo(
    *,
    tiny_dir: Path,
    engine_url: str,
    engine_name: str = "local-1",
    adapter_root: Path,
    token_file: Path,
) -> DemoResult:
    password = settings.DEMO_PASSWORD
    with transaction.atomic():
        tenants = {
            slug: Tenant.objects.get_or_create(slug=slug, defaults={"name": n, "slo_class": c})[0]
            for slug, (n, c) in DEMO_TENANTS.items()
        }
        for username, (roles, memberships) in DEMO_USERS.items():
            user, created = User.objects.get_or_create(username=username)
            if created:
                user.set_password(password)
                user.is_staff = username == "admin"
                user.is_superuser = username == "admin"
                user.save()
            user.groups.add(*Group.objects.filter(name__in=roles))
            for slug, role in memberships.items():
                Membership.objects.get_or_create(
                    user=user, tenant=tenants[slug], defaults={"role": role}
                )
        base = BaseModel.objects.filter(name="tiny-llama").first() or base_model_register(
            access=SystemAccess(),
            name="tiny-llama",
            source=str(tiny_dir / "base"),
            hf_config=json.loads((tiny_dir / "base" / "config.json").read_text()),
        )
        Engine.objects.update_or_create(
            name=engine_name,
            defaults={
                "base_model": base,
                "url": engine_url,
                "served_model_name": "tiny-llama",
                "max_loras": 2,
                "max_cpu_loras": 3,
                "max_lora_rank": 32,
                "adapter_root": str(adapter_root),
                "has_plugin": True,
                "state": EngineState.WARMING,
            },
        )
    uploaded = []
    for (slug, name), sample in DEMO_ADAPTERS.items():
        owner = Membership.objects.get(tenant__slug=slug, role="owner").user
        access = AccessContext.for_user(owner)
        adapter = Adapter.objects.filter(tenant=tenants[slug], name=name).first() or adapter_create(
            access=access,
            tenant=tenants[slug],
            name=name,
            base_model=base,
            description=f"Demo adapter from {sample}",
        )
        if adapter.versions.exists():
            continue
        source = tiny_dir / "adapters" / sample
        config = (source / "adapter_config.json").read_bytes()
        with open(source / "adapter_model.safetensors", "rb") as model:
            version_upload(
                access=access,
                adapter=adapter,
                config=IncomingFile(io.BytesIO(config), len(config)),
                model=IncomingFile(model, os.fstat(model.fileno()).st_size),
            )
        uploaded.append(f"{slug}/{name}")
    released = release_demo_adapter()
    release = seed_demo_release(tiny_dir=tiny_dir, release=release_demo_adapter)
    price_demo_engine_hours()
    sso = seed_demo_sso()
    return DemoResult(
        password=password,
        users=list(DEMO_USERS),
        uploaded=uploaded,
        released=released,
        release=release,
        inference_token=demo_inference_token(token_file),
        sso=sso,
    )


# `make run`'s demo identity provider (tests/oidc_provider/demo.py): its groups -> roles here.
DEMO_SSO_PROVIDER = "demo-idp"
DEMO_SSO_MAPPINGS = [
    ("acme-maintainers", "acme", "maintainer", ""),
    ("globex-viewers", "globex", "viewer", ""),
    ("reviewers", "", "", "reviewer"),
]


def seed_demo_sso() -> bool:
    """The demo provider's mappings, when it is configured (OIDC_PROVIDERS, as `make run` sets)."""
    from django.conf import settings

    from tenants.sso.models import SsoMapping

    if not any(p["name"] == DEMO_SSO_PROVIDER for p in settings.OIDC_PROVIDERS):
        return False
    for value, tenant, role, platform_role in DEMO_SSO_MAPPINGS:
        SsoMapping.objects.get_or_create(
            provider=DEMO_SSO_PROVIDER,
            claim="groups",
            value=value,
            tenant=Tenant.objects.filter(slug=tenant).first(),
            role=role,
            platform_role=platform_role,
        )
    return True


def price_demo_engine_hours() -> None:
    """The cost view's price, unless someone set one already."""
    from gateway.cost import cost_settings_update
    from gateway.models import CostSettings

    if CostSettings.objects.exists():
        return
    cost_settings_update(
        access=AccessContext.for_user(User.objects.get(username="admin")),
        price_per_engine_hour=DEMO_PRICE_PER_ENGINE_HOUR,
        currency="USD",
        dedicated_slots=8,
    )


def demo_inference_token(token_file: Path) -> str:
    """An inference token for alice (acme), kept in var/ so a re-run can print it again (a token
    is shown once; the demo's is for trying the gateway with curl or the openai client)."""
    from tenants.services.tokens import token_issue

    if token_file.exists():
        return token_file.read_text().strip()
    issued = token_issue(
        access=AccessContext.for_user(User.objects.get(username="alice")),
        scopes=["inference"],
        tenant=Tenant.objects.get(slug="acme"),
        name="demo-inference",
    )
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text(issued.plaintext + "\n")
    token_file.chmod(0o600)
    return issued.plaintext


def release_demo_adapter(tenant: str = "acme", name: str = "support", number: int = 1) -> str:
    """Take one demo adapter through the whole lifecycle, as its people would: validated,
    approved by the reviewer, released by the owner (acme is gold: the reviewer gives the second
    approval). The release places it on the demo engine, so the dashboard shows it resident."""
    from adapters.models import AdapterVersion, VersionStatus
    from adapters.services.lifecycle import version_approve, version_release
    from adapters.services.validation import run_validation

    version = AdapterVersion.objects.filter(
        tenant__slug=tenant, adapter__name=name, number=number
    ).first()
    if version is None:
        return ""
    if version.status in (VersionStatus.UPLOADED, VersionStatus.VALIDATING):
        version = run_validation(version_id=version.pk) or version
        version.refresh_from_db()
    reviewer = User.objects.get(username="rita")
    owner = User.objects.get(username="alice")
    if version.status == VersionStatus.VALIDATED:
        version = version_approve(
            version=version, access=AccessContext.for_user(reviewer), comment="demo"
        )
    if version.status == VersionStatus.STAGED:
        version = version_release(
            version=version, access=AccessContext.for_user(owner), comment="demo"
        )
        if version.status == VersionStatus.STAGED:  # gold: the second approval
            version = version_release(
                version=version, access=AccessContext.for_user(reviewer), comment="demo"
            )
    return f"{tenant}/{name}@{version.number} ({version.status})"

"""The world the permission matrix runs in, the clients of its principals, and a DB fingerprint.

On top of tests.factories.build_world(): gus holds a guardian grant on acme/support only; acme
also has `billing`; support@1 is active, @2 validated, @3 staged (bob uploaded them all);
globex/legal@1 is validated; alias support-bot -> support@1; bob has a token bound to acme;
engine cpu-1 holds support@1.
"""

from __future__ import annotations

import io
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from adapters.access import AccessContext
from adapters.models import (
    Adapter,
    AdapterUserObjectPermission,
    AdapterVersion,
    Alias,
    AliasTarget,
    BaseModel,
    Decision,
    DirectUpload,
)
from adapters.services import aliases, lifecycle, uploads
from adapters.services.validation import version_claim_for_validation
from budgets.models import Budget, PriceCard
from core.audit_models import AuditEvent
from tenants.models import ApiToken, Membership, SigningKey, Tenant
from tenants.notifications.models import Notification
from tenants.services.signing_keys import signing_key_add
from tenants.services.tenancy import adapter_grant
from tenants.services.tokens import token_issue, token_revoke
from tests.api.matrix import SESSION_USERS, Endpoint, expire, is_tenant_route, scopes_lacking
from tests.factories import (
    PASSWORD,
    TINY_HF_CONFIG,
    World,
    adapter_files,
    build_world,
    make_user,
)
from workers.models import Engine, Residency

User = get_user_model()


@dataclass
class State:
    world: World
    files: Path
    billing: Adapter
    bob_token: ApiToken
    engine: Engine
    new_key_pem: str = ""
    hf_config: dict[str, Any] = field(default_factory=lambda: dict(TINY_HF_CONFIG))
    direct_upload_id: str = "0" * 32
    raise_request_id: int = 0  # a pending raise alice asked for (set per case)
    direct_parts: list[dict[str, Any]] = field(default_factory=list)
    _open: ExitStack = field(default_factory=ExitStack)

    @property
    def config_text(self) -> str:
        return (self.files / "adapter_config.json").read_text()

    @property
    def model_size(self) -> int:
        return (self.files / "adapter_model.safetensors").stat().st_size

    def start_direct_upload(self, *, put_parts: bool) -> None:
        """bob starts a direct upload of support (storage must be S3); optionally PUTs its parts."""
        import httpx

        from adapters.services.direct_uploads import direct_upload_start

        config = self.config_text.encode()
        upload, parts = direct_upload_start(
            access=AccessContext.for_user(self.world.users["bob"]),
            adapter=self.world.support,
            model_size=self.model_size,
            config=uploads.IncomingFile(io.BytesIO(config), len(config)),
        )
        self.direct_upload_id = upload.public_id
        self.direct_parts = []
        if put_parts:
            data = (self.files / "adapter_model.safetensors").read_bytes()
            for part in parts:
                offset = (part.part_number - 1) * upload.part_size
                response = httpx.put(
                    part.url, content=data[offset : offset + part.size], timeout=60
                )
                assert response.status_code == 200, response.text
                self.direct_parts.append(
                    {"part_number": part.part_number, "etag": response.headers["ETag"]}
                )

    def upload_files(self) -> dict[str, Any]:
        return {
            "adapter_config": self._open.enter_context(
                open(self.files / "adapter_config.json", "rb")
            ),
            "adapter_model": self._open.enter_context(
                open(self.files / "adapter_model.safetensors", "rb")
            ),
        }

    def close(self) -> None:
        self._open.close()
        self._open = ExitStack()


def upload_version(files: Path, adapter: Adapter, uploader: Any) -> AdapterVersion:
    with (
        open(files / "adapter_config.json", "rb") as cfg,
        open(files / "adapter_model.safetensors", "rb") as model,
    ):
        return uploads.version_upload(
            access=AccessContext.for_user(uploader),
            adapter=adapter,
            config=uploads.IncomingFile(cfg, None),
            model=uploads.IncomingFile(model, None),
        )


def advance(version: AdapterVersion, status: str, *, reviewer: Any, owner: Any) -> AdapterVersion:
    """Walk a freshly uploaded version through the real services up to `status`."""
    steps = ("validated", "staged", "active")
    assert version_claim_for_validation(version_id=version.pk)
    version = lifecycle.version_record_validation(
        version=version,
        report={"valid": True, "errors": []},
        fields={
            "rank": 8,
            "alpha": 16.0,
            "target_modules": ["q_proj", "v_proj"],
            "dtype": "float32",
        },
    )
    if steps.index(status) >= 1:
        version = lifecycle.version_approve(
            version=version, access=AccessContext.for_user(reviewer), comment="ok"
        )
    if steps.index(status) >= 2:
        version = lifecycle.version_release(version=version, access=AccessContext.for_user(owner))
    return version


def build_state(tmp_path: Path) -> State:
    world = build_world()
    users = world.users
    users["gus"] = make_user("gus")
    users["sue"] = User.objects.create_superuser("sue", password=PASSWORD)
    adapter_grant(
        access=AccessContext.for_user(users["alice"]),
        adapter=world.support,
        username="gus",
        perms=["view_adapter", "change_adapter", "upload_version"],
    )
    billing = Adapter.objects.create(
        tenant=world.acme, name="billing", base_model=world.base, created_by=users["alice"]
    )
    files = adapter_files(tmp_path / "files")
    bob, rob, alice = users["bob"], users["rob"], users["alice"]
    for status in ("active", "validated", "staged"):
        advance(upload_version(files, world.support, bob), status, reviewer=rob, owner=alice)
    upload_version(files, billing, bob)
    advance(
        upload_version(files, world.legal, users["charlie"]), "validated", reviewer=rob, owner=None
    )
    aliases.alias_set(
        access=AccessContext.for_user(alice),
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    bob_token = token_issue(
        access=AccessContext.for_user(bob), scopes=["read"], tenant=world.acme, name="bob-ci"
    ).token
    engine = Engine.objects.create(
        name="cpu-1",
        base_model=world.base,
        url="http://127.0.0.1:8100",
        served_model_name=world.base.name,
        adapter_root="/srv/adapters",
    )
    Residency.objects.create(
        engine=engine, version=world.support.versions.get(number=1), desired_state="pinned"
    )
    Residency.objects.create(
        engine=engine,
        version=world.support.versions.get(number=3),
        desired_state="registered",
        observed_state="resident_cpu",
    )
    signing_key_add(
        access=AccessContext.for_user(alice),
        tenant=world.acme,
        name="release-key",
        public_key_pem=_public_pem(),
    )
    _eval_gate(world)
    _notifications(world)
    Budget.objects.create(tenant=world.acme, scope="tenant", tokens=100_000, window="month")
    return State(
        world=world,
        files=files,
        billing=billing,
        bob_token=bob_token,
        engine=engine,
        new_key_pem=_public_pem(),
    )


def _eval_gate(world: World) -> None:
    """Suite qa, a policy on support, and a passing run 1 on support@2 (which the approve row
    approves, so the gate lets it through)."""
    from evals.services.policies import policy_set
    from tests.evals.runs import finished_run, suite_version
    from tests.evals.suites import jsonl

    suite = suite_version(world, jsonl({"id": "c1", "prompt": "hi", "expect": {"json": False}}))
    policy_set(
        access=AccessContext.for_user(world.users["alice"]),
        adapter=world.support,
        suite="qa",
        min_pass_rate=0.5,
    )
    finished_run(world.support.versions.get(number=2), suite, {"c1": ("hello", "hi")})


def _notifications(world: World) -> None:
    """E-mail recipient ops@acme.test, webhook ops (on loopback: the matrix allows it) and a
    notice of acme's (made as a row: telling it would send to both)."""
    from tenants.notifications.services import email_recipient_add, webhook_create

    Notification.objects.create(
        tenant=world.acme, key="matrix-notice", subject="Budget at 80%", body="80 of 100"
    )

    alice = AccessContext.for_user(world.users["alice"])
    email_recipient_add(access=alice, tenant=world.acme, email="ops@acme.test")
    webhook_create(access=alice, tenant=world.acme, name="ops", url="http://127.0.0.1:9/ops")


def _public_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def _newest_plan_id() -> int:
    from evals.models import ReleasePlan

    plan = ReleasePlan.objects.order_by("-pk").first()
    return plan.pk if plan else 0


def route_params(state: State, endpoint: Endpoint, column: str) -> dict[str, str]:
    params = {
        "tenant": "acme",
        "adapter": "billing" if column == "gno" else "support",
        "number": "1",
        "username": "bob",
        "prefix": state.bob_token.prefix,
        "alias": "support-bot",
        "engine": state.engine.name,
        "name": state.world.base.name,
        "key": "release-key",
        "upload": state.direct_upload_id,
        "webhook": "ops",
        "notification": str(Notification.objects.get(key="matrix-notice").pk),
        "email": "ops@acme.test",
        "budget": str(Budget.objects.get(tenant__slug="acme", scope="tenant").pk),
        "raise_request": str(state.raise_request_id),
        "plan": str(_newest_plan_id()),
    }
    params.update(endpoint.params)
    return params


def client_for(state: State, endpoint: Endpoint, column: str) -> APIClient:
    """A client acting as `column` (see tests/api/matrix.py) for `endpoint`."""
    world = state.world
    if column == "anon":
        return APIClient()
    if column in SESSION_USERS:
        client = APIClient()
        client.force_login(world.users[SESSION_USERS[column]])
        return client
    actor = world.users[endpoint.actor]
    home = world.acme if is_tenant_route(endpoint.route) and not endpoint.unbound else None
    if column == "bnd":
        if not AccessContext.for_user(actor).sees_all_tenants():
            # A legitimate binding: the actor belongs to globex too, so only the binding differs.
            Membership.objects.get_or_create(
                user=actor, tenant=world.globex, defaults={"role": "viewer"}
            )
        return world.token_client(endpoint.actor, [endpoint.scope], tenant=world.globex)
    scopes = scopes_lacking(endpoint.scope) if column == "nos" else [endpoint.scope]
    client = world.token_client(endpoint.actor, scopes, tenant=home)
    if column == "exp":
        expire(client.issued.token)
    elif column == "rvk":
        token_revoke(token=client.issued.token, access=AccessContext.for_user(actor))
    return client


def fingerprint() -> dict[str, Any]:
    """Everything a request could change, minus what every request touches (last use, login)."""

    def rows(qs: Any, *fields: str) -> list[tuple]:
        return list(qs.order_by("pk").values_list("pk", *fields))

    return {
        "users": rows(User.objects, "username", "is_active", "is_superuser"),
        "groups": rows(User.groups.through.objects, "user_id", "group_id"),
        "tenants": rows(Tenant.objects, "slug", "name", "slo_class", "quota_adapters", "pool"),
        "memberships": rows(Membership.objects, "user_id", "tenant_id", "role"),
        "tokens": rows(
            ApiToken.objects, "prefix", "tenant_id", "scopes", "expires_at", "revoked_at"
        ),
        "base_models": rows(BaseModel.objects, "name", "source"),
        "adapters": rows(Adapter.objects, "tenant_id", "name", "description", "slo_class", "pool"),
        "grants": rows(
            AdapterUserObjectPermission.objects, "user_id", "permission_id", "content_object_id"
        ),
        "versions": rows(AdapterVersion.objects, "adapter_id", "number", "status", "serving_keys"),
        "decisions": rows(Decision.objects, "version_id", "kind", "actor_id"),
        "aliases": rows(Alias.objects, "tenant_id", "name", "updated_at"),
        "alias_targets": rows(AliasTarget.objects, "alias_id", "version_id", "weight"),
        "engines": rows(Engine.objects, "name", "state", "url", "max_loras"),
        "residency": rows(Residency.objects, "engine_id", "version_id", "desired_state"),
        "signing_keys": rows(SigningKey.objects, "tenant_id", "name", "revoked_at"),
        "signature_policy": rows(Tenant.objects, "require_signatures"),
        "direct_uploads": rows(DirectUpload.objects, "public_id", "state", "started_by_id"),
        "budgets": rows(Budget.objects, "tenant_id", "scope", "tokens", "window", "thresholds"),
        "price_cards": rows(PriceCard.objects, "base_model_id", "prompt_weight", "updated_at"),
        "audit": rows(AuditEvent.objects, "action"),
    }

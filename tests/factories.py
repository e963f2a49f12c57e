"""Builders for test data: personas, the tiny base model row, adapters and uploaded versions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from adapters.access import AccessContext, SystemAccess
from adapters.models import Adapter, BaseModel
from adapters.services.registry import base_model_register
from engine.sample_adapters import TINY_BASE_MODEL_NAME, write_lora_adapter
from tenants.models import Membership, Tenant
from tenants.services.tokens import IssuedToken, token_issue


class TokenClient(APIClient):
    """An API client and the token it signs in with (tests revoke it, read its prefix)."""

    def __init__(self, issued: IssuedToken, **defaults: Any) -> None:
        super().__init__(**defaults)
        self.issued = issued


User = get_user_model()
PASSWORD = "correct-horse-battery-staple"

# The tiny model's config.json, as engine/tiny_model.py writes it (the dims validation needs).
TINY_HF_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "vocab_size": 512,
}


def make_user(username: str, *, roles: tuple[str, ...] = ()) -> Any:
    user = User.objects.create_user(username=username, password=PASSWORD)
    if roles:
        # get_or_create: a transactional test's flush also empties the groups the migration made.
        user.groups.set([Group.objects.get_or_create(name=role)[0] for role in roles])
    return user


def tiny_base_model() -> BaseModel:
    existing = BaseModel.objects.filter(name=TINY_BASE_MODEL_NAME).first()
    return existing or base_model_register(
        access=SystemAccess(),
        name=TINY_BASE_MODEL_NAME,
        source="var/tiny/base",
        hf_config=TINY_HF_CONFIG,
    )


@dataclass
class World:
    """Healthchecks-style personas: alice owns acme, bob maintains it, vera views it; charlie owns
    globex; rita reviews, olga operates and adam administers the platform; nora belongs nowhere."""

    acme: Tenant
    globex: Tenant
    base: BaseModel
    support: Adapter
    legal: Adapter
    users: dict[str, Any]

    def client(self, who: str | None) -> APIClient:
        client = APIClient()
        if who is not None:
            client.force_login(self.users[who])
        return client

    def token_client(
        self, who: str, scopes: list[str], tenant: Tenant | None = None, **kwargs: Any
    ) -> TokenClient:
        issued = token_issue(
            access=AccessContext.for_user(self.users[who]), scopes=scopes, tenant=tenant, **kwargs
        )
        client = TokenClient(issued)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.plaintext}")
        return client


def build_world() -> World:
    acme = Tenant.objects.create(slug="acme", name="Acme Corp", slo_class="silver")
    globex = Tenant.objects.create(slug="globex", name="Globex", slo_class="bronze")
    users = {
        "alice": make_user("alice"),
        "bob": make_user("bob"),
        "vera": make_user("vera"),
        "charlie": make_user("charlie"),
        "rita": make_user("rita", roles=("reviewer",)),
        "rob": make_user("rob", roles=("reviewer",)),
        "olga": make_user("olga", roles=("operator",)),
        "adam": make_user("adam", roles=("platform-admin",)),
        "nora": make_user("nora"),
    }
    for name, tenant, role in (
        ("alice", acme, "owner"),
        ("bob", acme, "maintainer"),
        ("vera", acme, "viewer"),
        ("charlie", globex, "owner"),
    ):
        Membership.objects.create(user=users[name], tenant=tenant, role=role)
    base = tiny_base_model()
    support = Adapter.objects.create(
        tenant=acme, name="support", base_model=base, created_by=users["alice"]
    )
    legal = Adapter.objects.create(
        tenant=globex, name="legal", base_model=base, created_by=users["charlie"]
    )
    return World(acme=acme, globex=globex, base=base, support=support, legal=legal, users=users)


def adapter_files(
    tmp: Path,
    *,
    rank: int = 8,
    targets: tuple[str, ...] = ("q_proj", "v_proj"),
    seed: int = 1,
    **kwargs: Any,
) -> Path:
    return write_lora_adapter(tmp, rank=rank, target_modules=targets, seed=seed, **kwargs)


def upload(
    client: APIClient, tenant: str, adapter: str, directory: Path, signature: bytes | None = None
):
    with (
        open(directory / "adapter_config.json", "rb") as cfg,
        open(directory / "adapter_model.safetensors", "rb") as model,
    ):
        data: dict[str, Any] = {"adapter_config": cfg, "adapter_model": model}
        if signature is not None:
            from django.core.files.uploadedfile import SimpleUploadedFile

            data["signature"] = SimpleUploadedFile("signature", signature)
        return client.post(
            f"/api/v1/tenants/{tenant}/adapters/{adapter}/versions/", data, format="multipart"
        )

"""Writes for base models and adapters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction

from adapters.models import Adapter, BaseModel
from adapters.validation.base_model import BaseModelSpec, BaseModelSpecError
from portal.audit import record_event
from portal.errors import ApplicationError, Conflict, clean_or_raise
from tenants.access import AccessContext
from tenants.models import Tenant

ADAPTER_FIELDS = ("description", "slo_class", "warmup_policy", "max_concurrent_requests", "pool")


def base_model_spec(base_model: BaseModel) -> BaseModelSpec:
    return BaseModelSpec(
        name=base_model.name,
        architecture=base_model.architecture,
        module_dims={k: tuple(v) for k, v in base_model.module_dims.items()},
        num_layers=base_model.num_layers,
        aliases=tuple(a for a in (base_model.source,) if a),
    )


def base_model_register(
    *,
    actor: Any,
    name: str,
    source: str,
    hf_config: dict[str, Any],
    revision: str = "",
    request_id: str = "",
) -> BaseModel:
    """Register a base model from its config.json; dims are derived, never typed in."""
    try:
        spec = BaseModelSpec.from_hf_config(hf_config, name)
    except BaseModelSpecError as exc:
        raise ApplicationError(exc.code, str(exc)) from None
    base = BaseModel(
        name=name,
        source=source,
        revision=revision,
        architecture=spec.architecture,
        hf_config=hf_config,
        module_dims={k: list(v) for k, v in spec.module_dims.items()},
        num_layers=spec.num_layers,
    )
    clean_or_raise(base, validate_unique=False)
    try:
        with transaction.atomic():
            base.save()
            record_event(
                action="base_model.register",
                actor=actor,
                obj=base,
                object_id=name,
                after={
                    "name": name,
                    "source": source,
                    "architecture": spec.architecture,
                    "module_dims": base.module_dims,
                },
                request_id=request_id,
            )
    except IntegrityError:
        raise Conflict(
            "base_model.exists", f"A base model named '{name}' already exists."
        ) from None
    return base


def base_model_register_from_dir(*, actor: Any, name: str, model_dir: Path) -> BaseModel:
    config_path = Path(model_dir) / "config.json"
    try:
        hf_config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise ApplicationError(
            "base_model.config_missing", f"No config.json in {model_dir}."
        ) from None
    except json.JSONDecodeError as exc:
        raise ApplicationError(
            "base_model.config_invalid", f"{config_path} is not valid JSON: {exc}."
        ) from None
    return base_model_register(actor=actor, name=name, source=str(model_dir), hf_config=hf_config)


def adapter_create(
    *,
    access: AccessContext,
    tenant: Tenant,
    name: str,
    base_model: BaseModel,
    request_id: str = "",
    **fields: Any,
) -> Adapter:
    access.require_tenant(tenant, "create_adapter")
    unknown = set(fields) - set(ADAPTER_FIELDS)
    if unknown:
        raise ApplicationError(
            "adapter.unknown_field", f"Unknown adapter field(s): {', '.join(sorted(unknown))}."
        )
    adapter = Adapter(
        tenant=tenant, name=name, base_model=base_model, created_by=access.user, **fields
    )
    clean_or_raise(adapter, validate_unique=False, exclude=["tenant", "base_model", "created_by"])
    try:
        with transaction.atomic():
            locked_tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
            if Adapter.objects.filter(tenant=locked_tenant).count() >= locked_tenant.quota_adapters:
                raise ApplicationError(
                    "quota.adapters",
                    f"Tenant '{tenant.slug}' has reached its quota of {locked_tenant.quota_adapters} adapters.",
                    status=409,
                )
            adapter.save()
            record_event(
                action="adapter.create",
                actor=access.user,
                tenant=tenant,
                obj=adapter,
                object_id=f"{tenant.slug}/{name}",
                after={
                    "name": name,
                    "base_model": base_model.name,
                    **{k: getattr(adapter, k) for k in ADAPTER_FIELDS},
                },
                request_id=request_id,
            )
    except IntegrityError:
        raise Conflict(
            "adapter.exists", f"Tenant '{tenant.slug}' already has an adapter named '{name}'."
        ) from None
    return adapter


def adapter_update(
    *, access: AccessContext, adapter: Adapter, request_id: str = "", **changes: Any
) -> Adapter:
    access.require_adapter(adapter, "change_adapter")
    unknown = set(changes) - set(ADAPTER_FIELDS)
    if unknown:
        raise ApplicationError(
            "adapter.unknown_field", f"Unknown adapter field(s): {', '.join(sorted(unknown))}."
        )
    with transaction.atomic():
        locked = Adapter.objects.select_for_update().select_related("tenant").get(pk=adapter.pk)
        before = {k: getattr(locked, k) for k in changes}
        for key, value in changes.items():
            setattr(locked, key, value)
        clean_or_raise(locked, validate_unique=False)
        locked.save()
        record_event(
            action="adapter.update",
            actor=access.user,
            tenant=locked.tenant,
            obj=locked,
            object_id=f"{locked.tenant.slug}/{locked.name}",
            before=before,
            after={k: getattr(locked, k) for k in changes},
            request_id=request_id,
        )
    return locked

"""Writes for base models and adapters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from adapters.fleet_port import fleet
from adapters.models import Adapter, BaseModel, WarmupPolicy
from adapters.selectors import pool_of
from adapters.signals import adapter_schedule_changed
from adapters.validation.base_model import BaseModelSpec, BaseModelSpecError
from core.audit import record_event
from core.errors import ApplicationError, Conflict, clean_or_raise
from tenants.access_port import Access
from tenants.models import Tenant

ADAPTER_FIELDS = (
    "description",
    "slo_class",
    "warmup_policy",
    "warmup_timezone",
    "warmup_days",
    "warmup_start",
    "warmup_end",
    "max_concurrent_requests",
    "pool",
)
# Where an adapter runs and how it ranks are platform decisions (capacity, cost), not a tenant's.
PLATFORM_FIELDS = ("pool", "slo_class")
# Fields the warm-up rules and beat entries depend on: a change re-checks and re-syncs them.
SCHEDULE_FIELDS = (
    "warmup_policy",
    "warmup_timezone",
    "warmup_days",
    "warmup_start",
    "warmup_end",
    "pool",
)


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
    access: Access,
    name: str,
    source: str,
    hf_config: dict[str, Any],
    revision: str = "",
    request_id: str = "",
) -> BaseModel:
    """Register a base model from its config.json; dims are derived, never typed in. A
    platform change: every tenant's adapters are validated against it."""
    access.require_platform_change("base models", code="base_model.not_platform_admin")
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
                actor=access.user,
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


def base_model_register_from_dir(*, access: Access, name: str, model_dir: Path) -> BaseModel:
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
    return base_model_register(access=access, name=name, source=str(model_dir), hf_config=hf_config)


def _require_platform_fields(access: Access, fields: list[str]) -> None:
    """Pools and SLO classes decide capacity and cost for every tenant: platform admins only."""
    if fields:
        names = " and ".join(sorted(fields))
        access.require_platform_change(f"an adapter's {names}", code="adapter.platform_field")


def _refuse_beyond_plan(adapter: Adapter) -> None:
    """A tenant's own adapters stay within the plan its platform admin set: a higher
    max_concurrent_requests would take engine slots from every other tenant."""
    limit = adapter.tenant.max_adapter_concurrency
    if adapter.max_concurrent_requests > limit:
        raise ApplicationError(
            "plan.adapter_concurrency",
            f"max_concurrent_requests {adapter.max_concurrent_requests} is above what tenant "
            f"'{adapter.tenant.slug}' may give one adapter ({limit}, max_adapter_concurrency). "
            "Use a lower value, or ask a platform admin to raise the tenant's limit.",
            status=409,
            limit=limit,
        )


def _changed(adapter: Adapter, changes: dict[str, Any], fields: tuple[str, ...]) -> list[str]:
    return [k for k in fields if k in changes and changes[k] != getattr(adapter, k)]


def _refuse_problems(adapter: Adapter) -> None:
    """Refuse a warm-up policy that breaks a hard rule; every problem goes in the details."""
    problems = fleet().warmup_problems(adapter=adapter)
    if problems:
        first = problems[0]
        raise ApplicationError(
            first.code,
            first.message,
            status=409,
            problems=[{"code": p.code, "message": p.message} for p in problems],
        )


def _sync_after_commit(adapter: Adapter) -> None:
    """Announce the new warm-up policy once it is committed; the fleet reacts (its beat entries)."""
    transaction.on_commit(lambda: adapter_schedule_changed.send(sender=Adapter, adapter=adapter))


def adapter_create(
    *,
    access: Access,
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
    _require_platform_fields(access, [k for k in PLATFORM_FIELDS if fields.get(k)])
    adapter = Adapter(
        tenant=tenant, name=name, base_model=base_model, created_by=access.user, **fields
    )
    clean_or_raise(adapter, validate_unique=False, exclude=["tenant", "base_model", "created_by"])
    try:
        with transaction.atomic():
            fleet().lock_schedule_scope(tenant_id=tenant.pk, pools=[pool_of(adapter)])
            locked_tenant = Tenant.objects.get(pk=tenant.pk)
            if Adapter.objects.filter(tenant=locked_tenant).count() >= locked_tenant.quota_adapters:
                raise ApplicationError(
                    "quota.adapters",
                    f"Tenant '{tenant.slug}' has reached its quota of {locked_tenant.quota_adapters} adapters.",
                    status=409,
                )
            adapter.tenant = locked_tenant  # the rules read its pool and pin quota as locked
            _refuse_beyond_plan(adapter)
            _refuse_problems(adapter)
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
            if adapter.warmup_policy != WarmupPolicy.ON_DEMAND:
                _sync_after_commit(adapter)
    except IntegrityError:
        raise Conflict(
            "adapter.exists", f"Tenant '{tenant.slug}' already has an adapter named '{name}'."
        ) from None
    return adapter


def adapter_update(
    *, access: Access, adapter: Adapter, request_id: str = "", **changes: Any
) -> Adapter:
    """Change an adapter. Tenant fields need change_adapter, pool and SLO class a platform admin
    (who needs nothing else for them); a warm-up change must keep the hard rules."""
    unknown = set(changes) - set(ADAPTER_FIELDS)
    if unknown:
        raise ApplicationError(
            "adapter.unknown_field", f"Unknown adapter field(s): {', '.join(sorted(unknown))}."
        )
    with transaction.atomic():
        # Tenant before adapter: the order uploads lock in, so the two never deadlock. Both
        # pools' engines when the pool moves: the rules count the new one.
        pools = {pool_of(adapter)}
        if changes.get("pool") is not None:
            pools.add(changes["pool"] or adapter.tenant.pool or settings.DEFAULT_POOL)
        fleet().lock_schedule_scope(tenant_id=adapter.tenant_id, pools=pools)
        locked = Adapter.objects.select_for_update().select_related("tenant").get(pk=adapter.pk)
        platform = _changed(locked, changes, PLATFORM_FIELDS)
        tenant_fields = set(changes) - set(PLATFORM_FIELDS)
        if tenant_fields or not platform or not access.is_platform_admin:
            access.require_adapter(locked, "change_adapter")
        _require_platform_fields(access, platform)
        before = {k: getattr(locked, k) for k in changes}
        for key, value in changes.items():
            setattr(locked, key, value)
        clean_or_raise(locked, validate_unique=False)
        if _changed_since(before, locked, ("max_concurrent_requests",)):
            _refuse_beyond_plan(locked)
        schedule_changed = bool(_changed_since(before, locked, SCHEDULE_FIELDS))
        if schedule_changed:
            _refuse_problems(locked)
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
        if schedule_changed:
            _sync_after_commit(locked)
    return locked


def _changed_since(before: dict[str, Any], adapter: Adapter, fields: tuple[str, ...]) -> list[str]:
    return [k for k in fields if k in before and before[k] != getattr(adapter, k)]

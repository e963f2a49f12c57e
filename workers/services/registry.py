"""Writes to the engine catalogue: register an engine, change its settings. Each change is one
transaction, audited; who may make it is asked inside (adapters/access.py), whoever calls."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from core.audit import record_event
from core.errors import Conflict, PermissionDenied, clean_or_raise
from tenants.access_port import Access
from workers.models import Engine

# Where an engine lives and what it is: its URL is where the prober, the controller and the
# gateway send the engine's key, its adapter root where workers write on the node, its served
# model name what every request to it names (a wrong one fails all of them). Platform admins
# only, so an operator cannot point the fleet at a host of their own and collect a key, nor
# break an engine's serving by renaming its model.
ENGINE_LOCATION_FIELDS = ("url", "adapter_root", "served_model_name")

ENGINE_AUDIT_FIELDS = (
    "pool",
    "url",
    "served_model_name",
    "max_loras",
    "max_cpu_loras",
    "max_lora_rank",
    "adapter_root",
    "state",
    "required",
)


def _require_operator(access: Access) -> None:
    if not access.is_operator:
        raise PermissionDenied(
            "permission.denied", "Only operators and platform admins change engines."
        )


def engine_create(*, access: Access, fields: dict[str, Any], request_id: str = "") -> Engine:
    """Register an engine. Placing one (its URL, its node's adapter root) is a platform admin's."""
    _require_operator(access)
    access.require_platform_change("where an engine lives", code="engine.location")
    engine = Engine(**fields)
    clean_or_raise(engine, validate_unique=False)
    try:
        with transaction.atomic():
            engine.save()
            record_event(
                action="engine.create",
                actor=access.user,
                obj=engine,
                object_id=engine.name,
                after={k: getattr(engine, k) for k in ENGINE_AUDIT_FIELDS},
                request_id=request_id,
            )
    except IntegrityError:
        raise Conflict(
            "engine.exists", f"An engine named '{engine.name}' already exists."
        ) from None
    return engine


def engine_update(
    *, access: Access, engine: Engine, changes: dict[str, Any], request_id: str = ""
) -> Engine:
    """Change an engine's settings; moving it (ENGINE_LOCATION_FIELDS) is a platform admin's."""
    _require_operator(access)
    moved = sorted(
        k for k in ENGINE_LOCATION_FIELDS if k in changes and changes[k] != getattr(engine, k)
    )
    if moved:
        access.require_platform_change(f"an engine's {' and '.join(moved)}", code="engine.location")
    if "state" in changes:
        raise PermissionDenied(
            "engine.state_owned",
            "An engine's state is set by the prober's verdict; use drain or undrain instead.",
        )
    with transaction.atomic():
        locked = Engine.objects.select_for_update().get(pk=engine.pk)
        before = {k: getattr(locked, k) for k in changes}
        for key, value in changes.items():
            setattr(locked, key, value)
        clean_or_raise(locked, validate_unique=False)
        locked.save()
        record_event(
            action="engine.update",
            actor=access.user,
            obj=locked,
            object_id=locked.name,
            before=before,
            after={k: getattr(locked, k) for k in changes},
            request_id=request_id,
        )
    return locked

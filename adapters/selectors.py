"""Reads for the registry, always through the caller's AccessContext."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Max, Q, QuerySet

from adapters.models import Adapter, AdapterUserObjectPermission, AdapterVersion, Alias
from core.errors import NotFound
from tenants.access_port import Access
from tenants.models import Tenant


def pool_of(adapter: Adapter) -> str:
    """The pool an adapter runs in: its own binding, its tenant's, or the default pool."""
    return adapter.pool or adapter.tenant.pool or settings.DEFAULT_POOL


def adapters_for(*, access: Access, tenant: Tenant) -> QuerySet[Adapter]:
    return (
        access.visible_adapters(tenant)
        .select_related("tenant", "base_model")
        .annotate(latest_version=Max("versions__number"))
        .order_by("name")
    )


def adapter_get(*, access: Access, tenant: Tenant, name: str) -> Adapter:
    adapter = adapters_for(access=access, tenant=tenant).filter(name=name).first()
    if adapter is None:
        raise NotFound(
            "adapter.not_found", f"Tenant '{tenant.slug}' has no adapter '{name}' visible to you."
        )
    return adapter


# Large JSON/text columns a version list never shows; leaving them out keeps the rows narrow, so
# sorting a big tenant's versions stays in memory (see docs/benchmarks.md, listing versions).
VERSION_LIST_DEFERRED = (
    "manifest",
    "config",
    "validation_report",
    "quarantine_keys",
    "serving_keys",
    "signature",
)


def _version_list_qs(qs: QuerySet[AdapterVersion]) -> QuerySet[AdapterVersion]:
    return qs.select_related("tenant", "adapter", "uploaded_by").order_by("-created_at", "-id")


def versions_of(*, adapter: Adapter) -> QuerySet[AdapterVersion]:
    return _version_list_qs(AdapterVersion.objects.filter(adapter=adapter))


def version_get(*, adapter: Adapter, number: int) -> AdapterVersion:
    version = (
        AdapterVersion.objects.select_related(
            "tenant", "adapter", "uploaded_by", "adapter__base_model"
        )
        .prefetch_related("decisions__actor")
        .filter(adapter=adapter, number=number)
        .first()
    )
    if version is None:
        raise NotFound("version.not_found", f"Adapter '{adapter.name}' has no version {number}.")
    return version


def versions_visible(*, access: Access) -> QuerySet[AdapterVersion]:
    """Versions across every tenant the caller can see: a reviewer's queue, a member's overview."""
    if access.sees_all_tenants():
        qs = AdapterVersion.objects.all()
        if access.bound_tenant_id is not None:
            qs = qs.filter(tenant_id=access.bound_tenant_id)
        return _version_list_qs(qs)
    member_tenants = [t for t in access.memberships if access.bound_tenant_id in (None, t)]
    granted = access.granted_adapters(outside_tenants=member_tenants)
    qs = AdapterVersion.objects.filter(Q(tenant_id__in=member_tenants) | Q(adapter__in=granted))
    return _version_list_qs(qs)


def aliases_for(*, tenant: Tenant) -> QuerySet[Alias]:
    return (
        Alias.objects.filter(tenant=tenant)
        .select_related("tenant")
        .prefetch_related("targets__version__adapter")
    )


@dataclass(frozen=True)
class Grant:
    adapter: str
    username: str
    perms: tuple[str, ...]


def grants_of(*, access: Access, tenant: Tenant) -> list[Grant]:
    """Per-object grants on the adapters of `tenant` the caller can see, one row per user."""
    rows = (
        AdapterUserObjectPermission.objects.filter(
            content_object__in=access.visible_adapters(tenant)
        )
        .order_by("content_object__name", "user__username", "permission__codename")
        .values_list("content_object__name", "user__username", "permission__codename")
    )
    perms: dict[tuple[str, str], list[str]] = defaultdict(list)
    for adapter, username, codename in rows:
        perms[(adapter, username)].append(codename)
    return [Grant(a, u, tuple(p)) for (a, u), p in perms.items()]

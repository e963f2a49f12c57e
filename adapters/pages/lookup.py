"""Resolving a page's path to objects through the caller's AccessContext (out of reach: 404)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest

from adapters import selectors
from adapters.models import Adapter, AdapterVersion
from tenants.access_port import Access
from tenants.models import Tenant
from tenants.pagekit import access_for


@dataclass(frozen=True)
class Scope:
    access: Access
    tenant: Tenant


def tenant_scope(request: HttpRequest, tenant: str) -> Scope:
    access = access_for(request)
    return Scope(access=access, tenant=access.get_tenant(tenant))


def adapter_in_scope(request: HttpRequest, tenant: str, adapter: str) -> tuple[Scope, Adapter]:
    scope = tenant_scope(request, tenant)
    return scope, selectors.adapter_get(access=scope.access, tenant=scope.tenant, name=adapter)


def version_in_scope(
    request: HttpRequest, tenant: str, adapter: str, number: int
) -> tuple[Scope, AdapterVersion]:
    scope, found = adapter_in_scope(request, tenant, adapter)
    return scope, selectors.version_get(adapter=found, number=number)

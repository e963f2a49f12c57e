"""The base viewsets: authentication, token scopes and tenant scoping in one place.

A viewset declares what each action needs (`action_scopes`, `tenant_capabilities`); the base
applies it before the handler runs. An action with no declared capability fails closed.
"""

from __future__ import annotations

from typing import Any

from rest_framework import viewsets
from rest_framework.permissions import SAFE_METHODS

from core.errors import PermissionDenied
from tenants.access_port import Access, access_for_request
from tenants.models import Tenant


class PortalViewSet(viewsets.GenericViewSet):
    # action -> token scope; default: read for safe methods, write otherwise
    action_scopes: dict[str, str] = {}
    # The model listed, for the OpenAPI schema, which is generated without a request.
    schema_model: Any = None
    access: Access

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("get_queryset")
        if own is not None:

            def get_queryset(self: Any, _own: Any = own) -> Any:
                if getattr(self, "swagger_fake_view", False) and self.schema_model is not None:
                    return self.schema_model.objects.none()
                return _own(self)

            cls.get_queryset = get_queryset  # type: ignore[method-assign]

    def get_queryset(self) -> Any:
        # A viewset whose handlers list through selectors has no queryset of its own; the
        # schema generator still asks for one to learn the model.
        if getattr(self, "swagger_fake_view", False) and self.schema_model is not None:
            return self.schema_model.objects.none()
        return super().get_queryset()

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.access = access_for_request(request)
        scope = self.action_scopes.get(self.action or "")
        if scope is None:
            scope = "read" if request.method in SAFE_METHODS else "write"
        self.access.require_scope(scope)
        self.check_access()
        if request.method not in SAFE_METHODS and _sends_json(request):
            # Parsed now, for every write, whether or not the action reads it: a JSON body that
            # is not an object is a 400 (core/api/parsers.py) on every write, never a 500 in a
            # handler that reads fields off it, and never ignored by one that reads none.
            request.data  # noqa: B018

    def check_access(self) -> None:
        """Platform-level checks; tenant viewsets check the tenant instead."""

    @property
    def request_id(self) -> str:
        return getattr(self.request, "request_id", "")


def _sends_json(request: Any) -> bool:
    media_type = (request.content_type or "").partition(";")[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


class TenantScopedViewSet(PortalViewSet):
    """Everything under /tenants/{tenant}/: the tenant must be visible (else 404) and the
    caller's role must allow the action's capability (else 403)."""

    tenant_capabilities: dict[str, str] = {}
    tenant: Tenant

    def check_access(self) -> None:
        self.tenant = self.access.get_tenant(self.kwargs["tenant"])
        capability = self.tenant_capabilities.get(self.action or "")
        if capability is None:
            raise PermissionDenied("permission.denied", "This action is not available.")
        if capability != "object":  # "object": the handler checks per-object rights itself
            self.access.require_tenant(self.tenant, capability)


class PlatformViewSet(PortalViewSet):
    """Platform resources: who may do what is a function of platform roles only."""

    # action -> predicate name on the Access (e.g. "is_platform_admin", "is_operator")
    platform_roles: dict[str, tuple[str, ...]] = {}

    def check_access(self) -> None:
        needed = self.platform_roles.get(self.action or "")
        if needed is None:
            raise PermissionDenied("permission.denied", "This action is not available.")
        if needed:
            self.access.require_platform_role(*needed)

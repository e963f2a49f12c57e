"""Page URLs of the platform admins: tenants, users, base models (usage and cost are gateway/urls.py)."""

from django.urls import path

from adapters.pages import base_models
from tenants import pages_platform
from tenants.sso.pages import mappings as sso_mappings

urlpatterns = [
    path("platform/", pages_platform.platform_tenants, name="platform-home"),
    path("platform/tenants/<slug:tenant>/", pages_platform.platform_tenant, name="platform-tenant"),
    path("platform/users/", pages_platform.platform_users, name="platform-users"),
    path(
        "platform/users/<str:username>/roles/",
        pages_platform.platform_user_roles,
        name="platform-user-roles",
    ),
    path(
        "platform/users/<str:username>/active/",
        pages_platform.platform_user_active,
        name="platform-user-active",
    ),
    path("platform/sso/", sso_mappings.platform_sso, name="platform-sso"),
    path("platform/sso/dry-run/", sso_mappings.platform_sso_dry_run, name="platform-sso-dry-run"),
    path(
        "platform/sso/mappings/<int:mapping_id>/delete/",
        sso_mappings.platform_sso_mapping_delete,
        name="platform-sso-mapping-delete",
    ),
    path("platform/base-models/", base_models.base_models, name="platform-base-models"),
]

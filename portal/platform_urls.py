"""Page URLs of the platform admins: tenants, users, base models (usage is gateway/usage_urls)."""

from django.urls import path

from adapters.pages import base_models
from tenants import pages_platform

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
    path("platform/base-models/", base_models.base_models, name="platform-base-models"),
]

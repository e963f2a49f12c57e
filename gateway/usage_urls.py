"""Page URLs for usage (chargeback): one tenant's, and every tenant's for platform admins."""

from django.urls import path

from gateway import usage_pages

urlpatterns = [
    path("t/<slug:tenant>/usage/", usage_pages.tenant_usage, name="tenant-usage"),
    path("platform/usage/", usage_pages.platform_usage, name="platform-usage"),
]

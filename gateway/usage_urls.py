"""Page URLs for usage (chargeback) and cost: one tenant's, and every tenant's for platform
admins (cost: and auditors)."""

from django.urls import path

from gateway import cost_pages, usage_pages

urlpatterns = [
    path("t/<slug:tenant>/usage/", usage_pages.tenant_usage, name="tenant-usage"),
    path("platform/usage/", usage_pages.platform_usage, name="platform-usage"),
    path("t/<slug:tenant>/cost/", cost_pages.tenant_cost, name="tenant-cost"),
    path("platform/cost/", cost_pages.platform_cost, name="platform-cost"),
    path(
        "platform/cost/settings/", cost_pages.platform_cost_settings, name="platform-cost-settings"
    ),
]

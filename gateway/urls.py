"""Page URLs the gateway owns: the tenant's playground; usage (chargeback) and cost, one tenant's
and every tenant's for platform admins (cost: and auditors)."""

from django.urls import path

from gateway.pages import cost, playground, usage

urlpatterns = [
    path("t/<slug:tenant>/playground/", playground.playground, name="tenant-playground"),
    path("t/<slug:tenant>/usage/", usage.tenant_usage, name="tenant-usage"),
    path("platform/usage/", usage.platform_usage, name="platform-usage"),
    path("t/<slug:tenant>/cost/", cost.tenant_cost, name="tenant-cost"),
    path("platform/cost/", cost.platform_cost, name="platform-cost"),
    path("platform/cost/settings/", cost.platform_cost_settings, name="platform-cost-settings"),
]

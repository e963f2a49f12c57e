"""Every REST resource under /api/v1/, addressed by slug or name, never by database id."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter, SimpleRouter

from adapters.api import (
    AdapterViewSet,
    AliasViewSet,
    BaseModelViewSet,
    VersionQueueViewSet,
    VersionViewSet,
)
from adapters.api_uploads import DirectUploadViewSet
from budgets.api import BudgetViewSet, PriceCardViewSet
from budgets.api_raises import BudgetRaiseDecisionViewSet, BudgetRaiseRequestViewSet
from evals.api import PolicyViewSet, RunViewSet, SuiteViewSet
from evals.api_releases import ReleasePlanViewSet
from gateway.api import AdapterMetricsViewSet, TenantUsageViewSet, UsageViewSet
from gateway.api_cost import CostViewSet
from portal.api.audit import AuditViewSet
from portal.api.records import AuditExportViewSet, EvidenceKeyViewSet, EvidenceViewSet
from tenants.api import (
    MemberViewSet,
    ServiceClassViewSet,
    TenantTokenViewSet,
    TenantViewSet,
    TokenObtainView,
    UserViewSet,
)
from tenants.api_signing import SignaturePolicyViewSet, SigningKeyViewSet
from tenants.notifications.api import (
    EmailRecipientViewSet,
    NotificationViewSet,
    WebhookViewSet,
)
from tenants.sso.api import SsoProviderViewSet
from workers.api import EngineViewSet

root = DefaultRouter(trailing_slash=True)
root.include_root_view = False
root.register("users", UserViewSet, basename="user")
root.register("tenants", TenantViewSet, basename="tenant")
root.register("service-classes", ServiceClassViewSet, basename="service-class")
root.register("base-models", BaseModelViewSet, basename="base-model")
root.register("engines", EngineViewSet, basename="engine")
root.register("versions", VersionQueueViewSet, basename="version-queue")
root.register("audit", AuditViewSet, basename="audit")
root.register("usage", UsageViewSet, basename="usage")
root.register("sso/providers", SsoProviderViewSet, basename="sso-provider")
root.register("budget-raise-requests", BudgetRaiseDecisionViewSet, basename="budget-raise-request")

tenant = SimpleRouter(trailing_slash=True)
tenant.register("members", MemberViewSet, basename="member")
tenant.register("tokens", TenantTokenViewSet, basename="tenant-token")
tenant.register("adapters", AdapterViewSet, basename="adapter")
tenant.register("aliases", AliasViewSet, basename="alias")
tenant.register("signing-keys", SigningKeyViewSet, basename="signing-key")
tenant.register("usage", TenantUsageViewSet, basename="tenant-usage")
tenant.register("eval-suites", SuiteViewSet, basename="eval-suite")
tenant.register("notifications", NotificationViewSet, basename="notification")
tenant.register("email-recipients", EmailRecipientViewSet, basename="email-recipient")
tenant.register("webhooks", WebhookViewSet, basename="webhook")
tenant.register("budgets", BudgetViewSet, basename="budget")

adapter = SimpleRouter(trailing_slash=True)
adapter.register("versions", VersionViewSet, basename="version")
adapter.register("uploads", DirectUploadViewSet, basename="direct-upload")
adapter.register("metrics", AdapterMetricsViewSet, basename="adapter-metrics")

alias = SimpleRouter(trailing_slash=True)
alias.register("releases", ReleasePlanViewSet, basename="release-plan")

urlpatterns = [
    path("auth/token/", TokenObtainView.as_view(), name="auth-token"),
    path(
        "tenants/<slug:tenant>/adapters/<slug:adapter>/versions/<int:number>/evidence/",
        EvidenceViewSet.as_view({"get": "retrieve"}),
        name="version-evidence",
    ),
    path("evidence/key/", EvidenceKeyViewSet.as_view({"get": "list"}), name="evidence-key"),
    path("audit/export/", AuditExportViewSet.as_view({"get": "list"}), name="audit-export"),
    path("cost/", CostViewSet.as_view({"get": "list"}), name="cost"),
    path(
        "price-cards/",
        PriceCardViewSet.as_view({"get": "list", "put": "update_card"}),
        name="price-cards",
    ),
    path(
        "cost/settings/",
        CostViewSet.as_view({"get": "read_settings", "put": "update_settings"}),
        name="cost-settings",
    ),
    path(
        "tenants/<slug:tenant>/adapters/<slug:adapter>/eval-policy/",
        PolicyViewSet.as_view({"get": "retrieve", "put": "update"}),
        name="eval-policy",
    ),
    path(
        "tenants/<slug:tenant>/adapters/<slug:adapter>/versions/<int:number>/eval-runs/",
        RunViewSet.as_view({"get": "list", "post": "create"}),
        name="eval-run-list",
    ),
    path(
        "tenants/<slug:tenant>/adapters/<slug:adapter>/versions/<int:number>/eval-runs/<int:run>/",
        RunViewSet.as_view({"get": "retrieve"}),
        name="eval-run-detail",
    ),
    path(
        "tenants/<slug:tenant>/adapters/<slug:adapter>/versions/<int:number>/eval-runs/<int:run>/"
        "cases/",
        RunViewSet.as_view({"get": "cases"}),
        name="eval-run-cases",
    ),
    path("tenants/<slug:tenant>/adapters/<slug:adapter>/", include(adapter.urls)),
    path("tenants/<slug:tenant>/aliases/<slug:alias>/", include(alias.urls)),
    path(
        "tenants/<slug:tenant>/signature-policy/",
        SignaturePolicyViewSet.as_view({"get": "retrieve", "put": "update"}),
        name="signature-policy",
    ),
    path(
        "tenants/<slug:tenant>/budgets/<str:budget>/raise-requests/",
        BudgetRaiseRequestViewSet.as_view({"get": "list", "post": "create"}),
        name="budget-raise-requests",
    ),
    path("tenants/<slug:tenant>/", include(tenant.urls)),
    path("", include(root.urls)),
]

from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny, IsAuthenticated

from portal import views
from portal.pages import audit, dashboard, evidence

# JSON under /api/, a 503 with Retry-After while the database is away (portal.views).
handler500 = "portal.views.server_error"

# Behind login by default: the schema maps every route and parameter of the API.
docs_permissions = [AllowAny] if settings.API_DOCS_PUBLIC else [IsAuthenticated]

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path(
        "api/schema/",
        SpectacularAPIView.as_view(permission_classes=docs_permissions),
        name="api-schema",
    ),
    path(
        "api/docs/",
        SpectacularSwaggerView.as_view(url_name="api-schema", permission_classes=docs_permissions),
        name="api-docs",
    ),
    path("api/v1/", include("portal.api.urls")),
    # Server-rendered pages: the portal's own here, then one URL module per app, each holding
    # the pages of what that app owns.
    path("", dashboard.dashboard, name="dashboard"),
    path("audit/", audit.audit_log, name="audit"),
    path("audit/verify/", audit.audit_verify, name="audit-verify"),
    path(
        "t/<slug:tenant>/a/<slug:adapter>/v/<int:number>/evidence/",
        evidence.version_evidence_page,
        name="version-evidence-page",
    ),
    path("", include("workers.urls")),
    path("", include("tenants.urls")),
    path("", include("adapters.urls")),
    path("", include("evals.urls")),
    path("", include("gateway.urls")),
    path("", include("budgets.urls")),
]

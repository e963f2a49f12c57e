"""Page URLs the portal app owns: the audit log; the fleet's pages are mounted here too."""

from django.urls import include, path

from portal import pages

urlpatterns = [
    path("audit/", pages.audit_log, name="audit"),
    path("audit/verify/", pages.audit_verify, name="audit-verify"),
    path("", include("workers.page_urls")),
    path("", include("gateway.page_urls")),
]

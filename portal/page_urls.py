"""Page URLs the portal app owns: the audit log and a version's compliance record."""

from django.urls import path

from portal import evidence_pages, pages

urlpatterns = [
    path("audit/", pages.audit_log, name="audit"),
    path("audit/verify/", pages.audit_verify, name="audit-verify"),
    path(
        "t/<slug:tenant>/a/<slug:adapter>/v/<int:number>/evidence/",
        evidence_pages.version_evidence_page,
        name="version-evidence-page",
    ),
]

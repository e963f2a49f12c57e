"""Page URLs the portal app owns: the audit log."""

from django.urls import path

from portal import pages

urlpatterns = [
    path("audit/", pages.audit_log, name="audit"),
    path("audit/verify/", pages.audit_verify, name="audit-verify"),
]

"""Page URLs of the eval gate: a tenant's suites and policies, an alias's release plans. The run
and its cases show on the version page (adapters' page, through adapters/page_panels.py)."""

from django.urls import path

from evals import pages

urlpatterns = [
    path("t/<slug:tenant>/evals/", pages.tenant_evals, name="tenant-evals"),
    path("t/<slug:tenant>/evals/policy/", pages.tenant_eval_policy, name="tenant-eval-policy"),
    path(
        "t/<slug:tenant>/aliases/<slug:alias>/releases/",
        pages.alias_releases,
        name="alias-releases",
    ),
    path(
        "t/<slug:tenant>/evals/<slug:adapter>/<int:number>/run/",
        pages.version_eval_run_start,
        name="version-eval-run-start",
    ),
]

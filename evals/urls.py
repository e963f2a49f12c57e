"""Page URLs of the eval gate: a tenant's suites and policies (the run and its cases show on the
version page, adapters' page, through adapters/page_panels.py); an alias's release plan."""

from django.urls import path

from evals.pages import gate, releases

urlpatterns = [
    path("t/<slug:tenant>/evals/", gate.tenant_evals, name="tenant-evals"),
    path("t/<slug:tenant>/evals/policy/", gate.tenant_eval_policy, name="tenant-eval-policy"),
    path(
        "t/<slug:tenant>/evals/<slug:adapter>/<int:number>/run/",
        gate.version_eval_run_start,
        name="version-eval-run-start",
    ),
    path(
        "t/<slug:tenant>/aliases/<slug:alias>/release/",
        releases.alias_release,
        name="alias-release",
    ),
    path(
        "t/<slug:tenant>/aliases/<slug:alias>/release/<int:plan>/<slug:action>/",
        releases.alias_release_action,
        name="alias-release-action",
    ),
]

"""Page URLs the fleet owns: engines, one engine and its actions, pools, residency, schedules,
alarms and the operators' alarm banner; and the fleet's Prometheus text at /metrics."""

from django.urls import path

from workers import views
from workers.pages import engine_forms, engines, overview

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    path("fleet/engines/", engines.engine_list, name="fleet-engines"),
    path("fleet/register-engine/", engine_forms.engine_new, name="fleet-engine-new"),
    path("fleet/engines/<slug:engine>/", engines.engine_detail, name="fleet-engine"),
    path(
        "fleet/engines/<slug:engine>/settings/",
        engine_forms.engine_edit,
        name="fleet-engine-edit",
    ),
    path(
        "fleet/engines/<slug:engine>/versions/<slug:verb>/",
        engines.version_act,
        name="fleet-version-act",
    ),
    path(
        "fleet/engines/<slug:engine>/state/<slug:verb>/",
        engines.engine_state,
        name="fleet-engine-state",
    ),
    path(
        "fleet/engines/<slug:engine>/reconcile/",
        engines.engine_reconcile,
        name="fleet-engine-reconcile",
    ),
    path("fleet/alarms/banner/", engines.alarm_banner, name="fleet-alarm-banner"),
    path("fleet/alarms/", overview.alarms, name="fleet-alarms"),
    path("fleet/advice/", overview.advice, name="fleet-advice"),
    path("fleet/pools/", overview.pools, name="fleet-pools"),
    path("fleet/residency/", overview.residency, name="fleet-residency"),
    path("fleet/schedules/", overview.schedules, name="fleet-schedules"),
]

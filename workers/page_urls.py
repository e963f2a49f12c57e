"""Page URLs the fleet owns: engines, one engine and its actions, pools, residency, schedules,
alarms and the operators' alarm banner."""

from django.urls import path

from workers import pages, pages_engine_forms, pages_overview

urlpatterns = [
    path("fleet/engines/", pages.engine_list, name="fleet-engines"),
    path("fleet/register-engine/", pages_engine_forms.engine_new, name="fleet-engine-new"),
    path("fleet/engines/<slug:engine>/", pages.engine_detail, name="fleet-engine"),
    path(
        "fleet/engines/<slug:engine>/settings/",
        pages_engine_forms.engine_edit,
        name="fleet-engine-edit",
    ),
    path(
        "fleet/engines/<slug:engine>/versions/<slug:verb>/",
        pages.version_act,
        name="fleet-version-act",
    ),
    path(
        "fleet/engines/<slug:engine>/state/<slug:verb>/",
        pages.engine_state,
        name="fleet-engine-state",
    ),
    path(
        "fleet/engines/<slug:engine>/reconcile/",
        pages.engine_reconcile,
        name="fleet-engine-reconcile",
    ),
    path("fleet/alarms/banner/", pages.alarm_banner, name="fleet-alarm-banner"),
    path("fleet/alarms/", pages_overview.alarms, name="fleet-alarms"),
    path("fleet/advice/", pages_overview.advice, name="fleet-advice"),
    path("fleet/pools/", pages_overview.pools, name="fleet-pools"),
    path("fleet/residency/", pages_overview.residency, name="fleet-residency"),
    path("fleet/schedules/", pages_overview.schedules, name="fleet-schedules"),
]

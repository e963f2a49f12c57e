"""Page URLs the fleet owns: engines, one engine and its actions, the operators' alarm banner."""

from django.urls import path

from workers import pages

urlpatterns = [
    path("fleet/engines/", pages.engine_list, name="fleet-engines"),
    path("fleet/engines/<slug:engine>/", pages.engine_detail, name="fleet-engine"),
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
]

"""Websocket routes; consumers live with the app that owns their data."""

from django.urls import path

from gateway.consumers import PlaygroundConsumer
from portal.consumers import FleetMetricsConsumer, LiveMetricsConsumer, TenantEventsConsumer

websocket_urlpatterns = [
    path("ws/tenants/<slug:tenant>/events/", TenantEventsConsumer.as_asgi()),
    path("ws/tenants/<slug:tenant>/metrics/", LiveMetricsConsumer.as_asgi()),
    path("ws/fleet/metrics/", FleetMetricsConsumer.as_asgi()),
    path("ws/tenants/<slug:tenant>/playground/", PlaygroundConsumer.as_asgi()),
]

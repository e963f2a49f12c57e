"""Websocket routes; consumers live with the app that owns their data."""

from django.urls import path

from portal.consumers import TenantEventsConsumer

websocket_urlpatterns = [
    path("ws/tenants/<slug:tenant>/events/", TenantEventsConsumer.as_asgi()),
]

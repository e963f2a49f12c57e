"""Websocket routes; consumers live with the app that owns their data."""

websocket_urlpatterns: list = []

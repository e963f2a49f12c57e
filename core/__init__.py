"""The shared base every app builds on: errors and their API handler, the API's base views and
pagination, page helpers, the websocket base, live events, the client's address, sign-in
throttling and the audit log.

Dependencies point one way: the apps (tenants, adapters, workers, gateway) import from here,
and the site wiring in `portal/` (settings, URLs, ASGI, Celery, the web shell) imports from the
apps and from here. Nothing here imports `portal` or an app's views
(tests/portal/test_layers.py checks it).
"""

"""ASGI entry point: /v1/ through the gateway (a lean ASGI app, no Django request machinery),
other HTTP through Django, websockets through Channels (authenticated, origin-checked)."""

import os

from django.core.asgi import get_asgi_application

from core.telemetry import configure as configure_tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# Before Django builds its middleware: the instrumentation adds its own (core.telemetry).
configure_tracing("lora-portal")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from core.socket_base import OriginCheck  # noqa: E402
from gateway.app import gateway_app  # noqa: E402
from portal.body_limits import limit_request_bodies  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402
from tenants.sso.edge import sso_edges  # noqa: E402

# Bodies are capped before Django spools or parses them (portal.body_limits); the single
# sign-on edges' floods are refused before Django's request machinery (tenants.sso.edge).
django_http_app = limit_request_bodies(sso_edges(django_asgi_app))


async def http_router(scope, receive, send):
    if scope["path"].startswith("/v1/"):
        await gateway_app(scope, receive, send)
    else:
        await django_http_app(scope, receive, send)


async def lifespan(scope, receive, send):
    """uvicorn's start and orderly stop (`--lifespan on`): on SIGTERM, once the requests under
    way have finished, the gateway stops its loops and sends the measurements it still holds
    (else the last second of usage and latency of a stopped replica is lost)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                await gateway_app.aclose()
            finally:
                await send({"type": "lifespan.shutdown.complete"})
            return


application = ProtocolTypeRouter(
    {
        "lifespan": lifespan,
        "http": http_router,
        "websocket": OriginCheck(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

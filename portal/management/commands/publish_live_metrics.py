"""`python manage.py publish_live_metrics`: the live pages' publisher (portal/live_publisher.py).

One per deployment is enough; more are harmless (each second is published once)."""

from __future__ import annotations

import asyncio
import signal

from channels.layers import get_channel_layer
from django.conf import settings
from django.core.management.base import BaseCommand
from redis import asyncio as aioredis

from portal.live_publisher import MetricsPublisher


class Command(BaseCommand):
    help = "Send the gateway's per-second numbers to the live pages' socket groups, once a second."

    def handle(self, *args, **options):
        asyncio.run(self._run())

    async def _run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        redis = aioredis.Redis.from_url(settings.REDIS_URL)
        self.stdout.write("live metrics publisher: one tick a second")
        try:
            await MetricsPublisher(redis=redis, layer=get_channel_layer("live")).run(stop)
        finally:
            await redis.aclose()

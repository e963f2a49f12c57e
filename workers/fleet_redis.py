"""The fleet's Redis client, one per process and URL: the bottom of the fleet's Redis modules
(workers.engine_slots' admission state and workers.shared_state's counts both use it)."""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


def client() -> redis.Redis:
    return _client(settings.REDIS_URL)

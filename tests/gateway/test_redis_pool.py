"""The gateway's Redis pool under a burst (bench-load): more requests at once than
pooled connections wait for a free connection instead of failing. redis-py's default pool raised
MaxConnectionsError ("Too many connections") past 100, which a 200-client burst reached: its
callers got 503 `limits_unavailable` while Redis was up."""

from __future__ import annotations

import asyncio

from gateway.app import Gateway


async def test_more_callers_than_connections_wait_for_one(transactional_db, settings):
    settings.GATEWAY_REDIS_MAX_CONNECTIONS = 4
    app = Gateway()
    name = app.redis.connection_pool.connection_kwargs["client_name"]
    # Other gateways of this process (earlier tests) share the name: count only the new ones.
    before = {c["id"] for c in await app.redis.client_list() if c.get("name") == name}
    try:
        # 300 commands at once, each holding a connection for a moment (a script's round trip).
        results = await asyncio.gather(
            *(app.redis.eval("return 1", 0) for _ in range(300)), return_exceptions=True
        )
        assert [r for r in results if r != 1] == []
        clients = await app.redis.client_list()
        mine = [c for c in clients if c.get("name") == name and c["id"] not in before]
        assert 1 <= len(mine) <= 4
    finally:
        await app.aclose()

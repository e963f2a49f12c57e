"""Websocket consumers: authenticate before accept, check access before joining a group."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from portal.errors import NotFound
from portal.events import tenant_group
from tenants.access import AccessContext


class TenantEventsConsumer(AsyncJsonWebsocketConsumer):
    """/ws/tenants/<slug>/events/: version status changes of one tenant, for its members."""

    group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        tenant_id = await self._visible_tenant_id(user, self.scope["url_route"]["kwargs"]["tenant"])
        if tenant_id is None:
            await self.close(code=4404)
            return
        self.group = tenant_group(tenant_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    @database_sync_to_async
    def _visible_tenant_id(self, user, slug: str) -> int | None:
        try:
            return AccessContext.for_user(user).get_tenant(slug).id
        except NotFound:
            return None

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        """Read-only: clients do not send anything."""

    async def portal_event(self, message: dict) -> None:
        await self.send_json(message["event"])

"""The scheduled re-check reaches the /v1/ gateway too: a person disabled at the provider has
their token refused there after beat's task runs (the gateway's ASGI app in process)."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from tenants.sso.models import SsoIdentity, SsoMapping
from tenants.tasks import recheck_sso_token_holders
from tests.gateway.inprocess import get, gw_fixture, token_for  # noqa: F401
from tests.sso.flow import sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def _signed_in_token(client, world, sso) -> str:
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=world.acme, role="maintainer"
    )
    sso.user("ola", groups=["ml-team"])
    sign_in(client, "ola")
    client.logout()
    return token_for(SsoIdentity.objects.get(user__username="ola").user, world.acme)


async def test_a_disabled_persons_token_is_refused_at_v1_after_the_re_check(gw, client, world, sso):
    token = await sync_to_async(_signed_in_token)(client, world, sso)
    assert (await get(gw, token, "/v1/models")).status_code == 200
    await sync_to_async(sso.user)("ola", groups=["ml-team"], active=False)
    await sync_to_async(recheck_sso_token_holders)()
    assert (await get(gw, token, "/v1/models")).status_code == 401

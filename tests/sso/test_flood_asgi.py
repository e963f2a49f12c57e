"""The flood's refusals are answered in front of Django (tenants/sso/edge.py, wired in
portal/asgi.py): the same answers as the views, and no Django request for any of them."""

from __future__ import annotations

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.signals import request_started

from core.audit_models import AuditEvent
from core.login_guard import clear_login_counters
from tenants.sso.guard import forget_lockouts
from tests.sso.test_flood import CLI_TOKEN, LOGOUT, _forged

pytestmark = pytest.mark.django_db(transaction=True)

ADDRESS = "198.51.100.8"


@pytest.fixture
def clean_address():
    for address in (ADDRESS, "198.51.100.9"):
        clear_login_counters(address)
    forget_lockouts()
    yield
    clear_login_counters(ADDRESS)
    forget_lockouts()


async def test_the_edges_refuse_a_flood_before_django(sso, settings, clean_address):
    from portal.asgi import application

    started: list[object] = []

    def seen(**kwargs: object) -> None:
        started.append(kwargs)

    request_started.connect(seen)
    limit = settings.AXES_FAILURE_LIMIT
    transport = httpx.ASGITransport(app=application, client=(ADDRESS, 4321))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as portal:
            tokens = await sync_to_async(_forged)(limit + 4, sso.issuer)
            answers = []
            for n, token in enumerate(tokens):
                if n % 2:
                    answers.append(await portal.post(LOGOUT, data={"logout_token": token}))
                else:
                    body = {"provider": "testidp", "id_token": token, "scopes": ["read"]}
                    answers.append(await portal.post(CLI_TOKEN, json=body))
            assert started == []  # not one reached Django
            locked = await portal.post(CLI_TOKEN, content=b"not json")
        other = httpx.ASGITransport(app=application, client=("198.51.100.9", 4321))
        async with httpx.AsyncClient(transport=other, base_url="http://127.0.0.1") as portal:
            passed = await portal.post(CLI_TOKEN, content=b"not json")  # the view's to answer
    finally:
        request_started.disconnect(seen)
    assert [a.status_code for a in answers] == [400] * limit + [429] * 4
    assert answers[0].json()["error"]["code"] == "sso.unknown_key"
    assert answers[1].json()["error"] == "sso.unknown_key"  # back-channel logout's own shape
    assert answers[-2].json()["error"]["code"] == "auth.locked_out"
    assert answers[-1].json()["error"] == "auth.locked_out"
    assert answers[-1].headers["Retry-After"] == str(settings.LOGIN_LOCKOUT_SECONDS)
    assert locked.status_code == 429  # a locked-out address: whatever it sends
    assert len(started) == 1 and passed.status_code == 400  # the view's own answer
    assert passed.json()["error"]["code"] == "invalid_request"
    rows = await sync_to_async(_refusals)()
    assert {(r["what"], r["code"], r["client_ip"]) for r in rows} == {
        ("cli", "sso.unknown_key", ADDRESS),
        ("backchannel-logout", "sso.unknown_key", ADDRESS),
        ("cli", "auth.locked_out", ADDRESS),
    }


def _refusals() -> list[dict]:
    return [e.after or {} for e in AuditEvent.objects.filter(action="sso.refused")]

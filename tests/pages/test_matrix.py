"""The permission matrix of every page, generated from PAGE_ROUTES."""

import pytest
from django.urls import reverse

from tests.pages.routes import PAGE_ROUTES

pytestmark = pytest.mark.django_db

# sue, a superuser with no membership, gets exactly what adam (platform admin) gets on every
# page: a superuser is a platform admin and nothing more inside tenants (docs/security.md, 7).
PERSONA_AS = {"sue": "adam"}
CASES = [(route, who, status) for route in PAGE_ROUTES for who, status in route.expect.items()]
CASES += [
    (route, who, route.expect[like])
    for who, like in PERSONA_AS.items()
    for route in PAGE_ROUTES
    if like in route.expect
]
GET_NAMES = {route.name for route in PAGE_ROUTES if route.method == "get"}
POST_ONLY = [route for route in PAGE_ROUTES if route.name not in GET_NAMES]


def _call(client, route, pages):
    url = reverse(route.name, kwargs=route.kwargs(pages))
    return getattr(client, route.method)(url, route.data)


@pytest.mark.parametrize("route", PAGE_ROUTES, ids=lambda r: r.id)
def test_it_sends_anonymous_callers_to_login(pages, route):
    response = _call(pages.client(None), route, pages)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


@pytest.mark.parametrize(
    ("route", "who", "status"), CASES, ids=[f"{r.id}-{w}" for r, w, _ in CASES]
)
def test_each_persona_gets_its_status(pages, route, who, status):
    response = _call(pages.client(who), route, pages)
    assert response.status_code == status, response.content.decode()[:2000]


@pytest.mark.parametrize("route", POST_ONLY, ids=lambda r: r.id)
def test_writes_refuse_get(pages, route):
    allowed = next((who for who, status in route.expect.items() if status == 302), "alice")
    response = pages.client(allowed).get(reverse(route.name, kwargs=route.kwargs(pages)))
    assert response.status_code == 405


@pytest.mark.parametrize(
    "route", [r for r in PAGE_ROUTES if r.method == "post"], ids=lambda r: r.id
)
def test_writes_need_a_csrf_token(pages, route):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(pages.world.users["alice"])
    response = client.post(reverse(route.name, kwargs=route.kwargs(pages)), route.data)
    assert response.status_code == 403
    assert b"CSRF" in response.content

"""The code flow by hand, for tests without a browser: the portal through Django's test client,
the person's browser at the provider through httpx (its own cookies, its real login form)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import httpx

from tests.fixtures.oidc_provider import PASSWORD

CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def authorize_at_provider(authorize_url: str, username: str, idp: httpx.Client) -> str:
    """Signs in at the provider's own page (once per httpx client), follows its authorization,
    and returns where the provider sends the browser back (the portal's callback URL)."""
    response = idp.get(authorize_url)
    if response.status_code == 302 and "/accounts/login/" in response.headers["location"]:
        login_url = httpx.URL(authorize_url).join(response.headers["location"])
        form = idp.get(login_url)
        token = CSRF_FIELD.search(form.text)
        assert token, form.text
        next_path = dict(login_url.params)["next"]
        posted = idp.post(
            login_url,
            data={
                "username": username,
                "password": PASSWORD,
                "csrfmiddlewaretoken": token.group(1),
                "next": next_path,
            },
            headers={"Referer": str(login_url)},
        )
        assert posted.status_code == 302, posted.text[:500]
        response = idp.get(httpx.URL(authorize_url).join(posted.headers["location"]))
    assert response.status_code == 302, response.text[:500]
    return response.headers["location"]


def start(client, provider_name: str = "testidp", next_path: str = "") -> str:
    query = f"?next={next_path}" if next_path else ""
    response = client.get(f"/sso/{provider_name}/start/{query}")
    assert response.status_code == 302, response.content[:300]
    return response["Location"]


def callback_path(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def sign_in(client, username: str, *, idp: httpx.Client | None = None):
    """The whole flow; the portal's answer to the callback."""
    own = idp is None
    idp = idp or httpx.Client()
    try:
        back = authorize_at_provider(start(client), username, idp)
    finally:
        if own:
            idp.close()
    return client.get(callback_path(back))


def decide_device_code(
    verification_uri: str, user_code: str, username: str, idp: httpx.Client, *, approve: bool
) -> None:
    """What a person does with the code a CLI printed: opens the provider's page, signs in there,
    types the code, and approves or denies."""
    page = idp.get(verification_uri)
    if page.status_code == 302 and "/accounts/login/" in page.headers["location"]:
        login_url = httpx.URL(verification_uri).join(page.headers["location"])
        form = idp.get(login_url)
        token = CSRF_FIELD.search(form.text)
        assert token, form.text
        posted = idp.post(
            login_url,
            data={
                "username": username,
                "password": PASSWORD,
                "csrfmiddlewaretoken": token.group(1),
                "next": dict(login_url.params)["next"],
            },
            headers={"Referer": str(login_url)},
        )
        assert posted.status_code == 302, posted.text[:500]
        page = idp.get(httpx.URL(verification_uri).join(posted.headers["location"]))
    assert page.status_code == 200, page.text[:500]
    entered = _post_form(idp, page, {"user_code": user_code})
    assert entered.status_code == 302, entered.text[:500]  # to the approve-or-deny page
    confirm = idp.get(page.url.join(entered.headers["location"]))
    assert confirm.status_code == 200, confirm.text[:500]
    decided = _post_form(idp, confirm, {"action": "accept" if approve else "deny"})
    assert decided.status_code == 302, decided.text[:500]


def _post_form(idp: httpx.Client, page: httpx.Response, fields: dict[str, str]) -> httpx.Response:
    token = CSRF_FIELD.search(page.text)
    assert token, page.text[:500]
    return idp.post(
        page.url,
        data={**fields, "csrfmiddlewaretoken": token.group(1)},
        headers={"Referer": str(page.url)},
    )

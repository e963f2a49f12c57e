"""The notifications page and the notice on every tenant page."""

from __future__ import annotations

from tenants.notifications.services import notify


def test_a_notice_shows_on_the_tenants_pages(world):
    notify(tenant=world.acme, key="k", subject="Budget 'tenant' at 80%", body="80 of 100")
    page = world.client("vera").get("/t/acme/").content.decode()
    assert 'data-testid="notices"' in page and "Budget &#x27;tenant&#x27; at 80%" in page
    other = world.client("charlie").get("/t/globex/").content.decode()
    assert 'data-testid="notices"' not in other


def test_owners_add_a_webhook_and_see_its_secret_once(world, settings, receiver):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    client = world.client("alice")
    answer = client.post(
        "/t/acme/notifications/webhooks/", {"name": "ops", "url": receiver.url}
    ).content.decode()
    assert 'data-testid="webhook-secret"' in answer and "whsec_" in answer
    again = client.get("/t/acme/notifications/").content.decode()
    assert "whsec_" not in again and receiver.url in again


def test_viewers_see_what_was_sent_but_not_where_it_goes(world):
    notify(tenant=world.acme, key="k", subject="hello", body="b")
    page = world.client("vera").get("/t/acme/notifications/").content.decode()
    assert "hello" in page and 'data-testid="webhooks"' not in page

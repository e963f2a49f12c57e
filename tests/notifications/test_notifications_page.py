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


def test_a_person_dismisses_a_notice_for_themselves_only(world):
    told = notify(tenant=world.acme, key="k", subject="Budget at 80%", body="80 of 100")
    assert told is not None
    vera, bob = world.client("vera"), world.client("bob")
    page = vera.get("/t/acme/budgets/").content.decode()
    assert f'data-testid="dismiss-{told.pk}"' in page
    answer = vera.post(f"/t/acme/notifications/{told.pk}/dismiss/", {"next": "/t/acme/budgets/"})
    assert answer.status_code == 302 and answer["Location"] == "/t/acme/budgets/"
    assert 'data-testid="notices"' not in vera.get("/t/acme/").content.decode()
    assert "Budget at 80%" in vera.get("/t/acme/notifications/").content.decode()  # still listed
    assert 'data-testid="notices"' in bob.get("/t/acme/").content.decode()  # not bob's choice
    again = vera.post(f"/t/acme/notifications/{told.pk}/dismiss/", {"next": "https://evil.test/"})
    assert again.status_code == 302 and again["Location"] == "/t/acme/notifications/"
    other = world.client("charlie").post(f"/t/acme/notifications/{told.pk}/dismiss/")
    assert other.status_code == 404

"""The navigation shows the pages each role may open."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def _nav(pages, who):
    html = pages.client(who).get(reverse("dashboard")).content.decode()
    return html.split("<nav>", 1)[1].split("</nav>", 1)[0]


@pytest.mark.parametrize(
    ("who", "shown", "hidden"),
    [
        ("alice", ["/t/acme/", "/audit/", "/tokens/"], ["/review/", "/t/globex/"]),
        ("bob", ["/t/acme/", "/tokens/"], ["/audit/", "/review/"]),
        ("rita", ["/review/", "/tokens/"], ["/audit/", "/t/acme/"]),
        ("adam", ["/audit/", "/tokens/"], ["/review/"]),
        ("nora", ["/tokens/"], ["/audit/", "/review/", "/t/"]),
    ],
)
def test_links_follow_the_role(pages, who, shown, hidden):
    nav = _nav(pages, who)
    for link in shown:
        assert f'href="{link}"' in nav
    for link in hidden:
        assert f'href="{link}' not in nav

"""The pages lead to it all: the version page to its record, the tenant's tabs to its usage and
cost, the platform's tabs to the fleet's cost; each only for those who may open it."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

VERSION_PAGE = "/t/acme/a/support/v/3/"


@pytest.mark.parametrize(("who", "shown"), [("alice", True), ("adam", True), ("vera", False)])
def test_the_version_page_links_to_its_record(history, who, shown):
    page = history.world.client(who).get(VERSION_PAGE).content.decode()
    assert ('href="/t/acme/a/support/v/3/evidence/"' in page) is shown


@pytest.mark.parametrize(("who", "shown"), [("alice", True), ("bob", False)])
def test_the_tenant_tabs_link_to_usage_and_cost(history, who, shown):
    page = history.world.client(who).get("/t/acme/").content.decode()
    assert ('href="/t/acme/cost/"' in page) is shown
    assert ('href="/t/acme/usage/"' in page) is shown


def test_the_platform_tabs_link_to_the_fleets_cost_and_auditors_find_it_in_the_menu(history):
    page = history.world.client("adam").get("/platform/").content.decode()
    assert 'href="/platform/cost/"' in page
    menu = history.world.client("aude").get("/").content.decode()
    assert 'href="/platform/cost/"' in menu
    assert history.world.client("aude").get("/platform/cost/").status_code == 200


def test_the_audit_page_offers_the_export_to_those_who_may(history):
    owner = history.world.client("alice").get("/audit/", {"tenant": "acme"}).content.decode()
    assert "/api/v1/audit/export/?format=csv&amp;tenant=acme" in owner
    auditor = history.world.client("aude").get("/audit/").content.decode()
    assert "/api/v1/audit/export/?format=jsonl" in auditor

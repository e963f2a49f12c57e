"""A tenant's pages for each role: tabs, members and grants, tokens, keys, usage, adapters,
aliases' promote and rollback, and the version page's lifecycle. Through the pages, checked in
the database and the audit."""

import re
from datetime import date

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.urls import reverse

from adapters.access import AccessContext
from adapters.models import Adapter, Alias
from core.audit_models import AuditEvent
from gateway.models import DailyUsage
from tenants.models import Membership, SigningKey
from tenants.services.tokens import token_issue
from tests.pages.builders import active, validated

pytestmark = pytest.mark.django_db


def _tabs(client, url):
    page = client.get(url).content.decode()
    nav = page[page.index('<nav class="tabs"') :]
    nav = nav[: nav.index("</nav>")]
    return {
        name
        for name in ("Aliases", "Members", "Signing keys", "Usage", "Playground")
        if name in nav
    }


def test_each_role_sees_the_tabs_its_pages_admit(pages):
    url = reverse("tenant-adapters", args=["acme"])
    assert _tabs(pages.client("alice"), url) == {
        "Aliases",
        "Members",
        "Signing keys",
        "Usage",
        "Playground",
    }
    assert _tabs(pages.client("bob"), url) == {"Aliases", "Members", "Signing keys", "Playground"}
    assert _tabs(pages.client("vera"), url) == {"Aliases", "Members", "Signing keys"}


def test_a_grantee_sees_only_the_adapters_tab(pages):
    pages.client("alice").post(
        reverse("grant-add", args=["acme"]),
        {"adapter": "support", "username": "nora", "perms": ["view_adapter"]},
    )
    assert _tabs(pages.client("nora"), reverse("tenant-adapters", args=["acme"])) == set()


def test_an_owner_adds_a_member_and_changes_a_role(pages):
    owner = pages.client("alice")
    url = reverse("tenant-members", args=["acme"])
    assert owner.post(url, {"username": "nora", "role": "viewer"}).status_code == 302
    assert owner.post(url, {"username": "nora", "role": "maintainer"}).status_code == 302
    assert Membership.objects.get(user__username="nora", tenant__slug="acme").role == "maintainer"
    assert AuditEvent.objects.filter(action="membership.set", object_id="acme:nora").count() == 2
    assert "Add member" in owner.get(url).content.decode()
    assert "Add member" not in pages.client("vera").get(url).content.decode()


def test_the_last_owner_cannot_be_removed(pages):
    response = pages.client("alice").post(reverse("member-remove", args=["acme", "alice"]))
    assert response.status_code == 409
    assert b"membership.last_owner" in response.content
    assert Membership.objects.filter(user__username="alice", tenant__slug="acme").exists()


def test_a_grant_from_the_page_reaches_one_adapter_and_is_revoked(pages):
    owner = pages.client("alice")
    owner.post(
        reverse("grant-add", args=["acme"]),
        {"adapter": "support", "username": "nora", "perms": ["view_adapter"]},
    )
    nora = AccessContext.for_user(pages.world.users["nora"])
    assert nora.adapter_can(pages.world.support, "view_adapter")
    assert "nora" in owner.get(reverse("tenant-members", args=["acme"])).content.decode()
    owner.post(reverse("grant-revoke", args=["acme", "support", "nora"]))
    assert not AccessContext.for_user(pages.world.users["nora"]).adapter_can(
        pages.world.support, "view_adapter"
    )


def test_owners_see_and_revoke_every_token_of_the_tenant_others_only_theirs(pages):
    bobs = token_issue(
        access=AccessContext.for_user(pages.world.users["bob"]),
        scopes=["read"],
        tenant=pages.world.acme,
    )
    url = reverse("tenant-members", args=["acme"])
    prefix = f"lp_{bobs.token.prefix}_"
    assert prefix in pages.client("alice").get(url).content.decode()
    assert prefix not in pages.client("vera").get(url).content.decode()
    pages.client("alice").post(reverse("tenant-token-revoke", args=["acme", bobs.token.prefix]))
    bobs.token.refresh_from_db()
    assert bobs.token.revoked_at is not None


def _pem():
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def test_an_owner_adds_and_revokes_a_signing_key_and_requires_signatures(pages):
    owner = pages.client("alice")
    url = reverse("tenant-keys", args=["acme"])
    assert owner.post(url, {"name": "ci", "public_key_pem": _pem()}).status_code == 302
    assert "ci" in pages.client("vera").get(url).content.decode()
    owner.post(reverse("signature-policy-set", args=["acme"]), {"require_signatures": "on"})
    pages.world.acme.refresh_from_db()
    assert pages.world.acme.require_signatures
    owner.post(reverse("signing-key-revoke", args=["acme", "ci"]))
    assert SigningKey.objects.get(name="ci").revoked_at is not None


def test_usage_shows_rows_and_totals_and_exports_the_same_csv(pages):
    today = date.today()
    DailyUsage.objects.create(
        tenant=pages.world.acme,
        version=pages.active,
        day=today,
        requests=7,
        prompt_tokens=70,
        completion_tokens=140,
    )
    owner = pages.client("alice")
    page = owner.get(reverse("tenant-usage", args=["acme"])).content.decode()
    assert "<td>7</td><td>70</td><td>140</td>" in page
    link = re.search(r'href="([^"]+)" data-testid="csv-export"', page)
    assert link is not None, "the usage page links its CSV export"
    csv_url = link.group(1).replace("&amp;", "&")
    assert csv_url.startswith(reverse("tenant-usage-list", args=["acme"]))
    exported = owner.get(csv_url)
    assert exported.status_code == 200 and exported["Content-Type"].startswith("text/csv")
    assert (
        # No service class (classes off when it was recorded) and no shadow pairs' part.
        f"{today},acme,support,support@{pages.active.number},,7,70,140,0,0,0"
        in exported.content.decode()
    )


def test_a_maintainer_creates_an_adapter_and_bad_input_creates_nothing(pages):
    url = reverse("adapter-create", args=["acme"])
    maintainer = pages.client("bob")
    ok = maintainer.post(
        url, {"name": "billing", "base_model": "tiny-llama", "max_concurrent_requests": "4"}
    )
    assert ok.status_code == 302
    assert Adapter.objects.get(tenant__slug="acme", name="billing").max_concurrent_requests == 4
    bad = maintainer.post(url, {"name": "Bad Name!", "base_model": "tiny-llama"})
    assert bad.status_code == 400 and b"adapter.invalid" in bad.content
    assert not Adapter.objects.filter(name="Bad Name!").exists()


def test_adapter_settings_are_checked_by_the_api_rules(pages):
    url = reverse("adapter-update", args=["acme", "support"])
    maintainer = pages.client("bob")
    bad = maintainer.post(
        url, {"warmup_policy": "preload_on_business_hours", "warmup_timezone": "Mars/Olympus"}
    )
    assert bad.status_code == 400 and b"warmup_timezone" in bad.content
    assert maintainer.post(url, {"description": "answers tickets"}).status_code == 302
    assert Adapter.objects.get(pk=pages.world.support.pk).description == "answers tickets"


def _targets(name):
    alias = Alias.objects.get(tenant__slug="acme", name=name)
    return {(t.version.number, t.weight) for t in alias.targets.all()}


def test_a_canary_is_promoted_then_rolled_back_from_the_page(pages, tmp_path):
    second = active(
        pages.world, validated(pages.world, "bob", pages.world.support, tmp_path, seed=5)
    )
    maintainer = pages.client("bob")
    maintainer.post(
        reverse("tenant-aliases", args=["acme"]),
        {
            "name": "prod",
            "version_0": f"support@{pages.active.number}",
            "weight_0": "90",
            "version_1": f"support@{second.number}",
            "weight_1": "10",
        },
    )
    page = maintainer.get(reverse("tenant-aliases", args=["acme"])).content.decode()
    assert "Promote to 100%" in page and "Roll back" in page
    maintainer.post(
        reverse("alias-promote", args=["acme", "prod"]), {"version": f"support@{second.number}"}
    )
    assert _targets("prod") == {(second.number, 100)}
    maintainer.post(reverse("alias-rollback", args=["acme", "prod"]), {"reason": "errors"})
    assert _targets("prod") == {(pages.active.number, 90), (second.number, 10)}
    assert AuditEvent.objects.filter(action="alias.rollback", object_id="acme/prod").exists()


def test_the_version_page_shows_lifecycle_history_and_every_check(pages):
    url = reverse("version-detail", args=["acme", "support", pages.validated.number])
    page = pages.client("vera").get(url).content.decode()
    assert 'aria-current="step">validated' in page
    assert "upload" in page and "validate" in page  # the audited history
    checks = pages.validated.validation_report["checks"]
    assert page.count('<tr class="check-') == len(checks) > 0
    assert "Approve</button>" not in page
    assert "Approve</button>" in pages.client("rita").get(url).content.decode()


def test_the_tenant_home_shows_quotas_to_members_only(pages):
    url = reverse("tenant-adapters", args=["acme"])
    assert 'data-testid="tenant-summary"' in pages.client("vera").get(url).content.decode()
    assert "Create adapter" in pages.client("bob").get(url).content.decode()
    assert "Create adapter" not in pages.client("vera").get(url).content.decode()


def test_the_adapter_page_offers_settings_to_those_who_may_change_them(pages):
    url = reverse("adapter-detail", args=["acme", "support"])
    page = pages.client("bob").get(url).content.decode()
    title = page[page.index("<title>") : page.index("</title>")]
    assert "<" not in title[len("<title>") :]
    assert page.count("Save settings") == 1 and "Platform settings" not in page
    assert "Save settings" not in pages.client("vera").get(url).content.decode()
    assert "Platform settings" in pages.client("adam").get(url).content.decode()


def test_a_grantee_reaches_only_the_granted_adapter(pages):
    pages.client("alice").post(
        reverse("grant-add", args=["acme"]),
        {"adapter": "support", "username": "nora", "perms": ["view_adapter"]},
    )
    nora = pages.client("nora")
    assert nora.get(reverse("adapter-detail", args=["acme", "support"])).status_code == 200
    for name in ("tenant-aliases", "tenant-members", "tenant-keys", "tenant-usage"):
        assert nora.get(reverse(name, args=["acme"])).status_code == 403, name

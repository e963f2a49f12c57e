"""Tenant adapters, adapter detail with versions, version detail, and the owner's actions."""

import pytest
from django.urls import reverse

from adapters.models import AdapterVersion, Decision
from tests.pages.builders import staged, validated

pytestmark = pytest.mark.django_db


def _url(name, version):
    return reverse(name, args=["acme", version.adapter.name, version.number])


def _status(version):
    return AdapterVersion.objects.get(pk=version.pk).status


def test_the_adapter_list_shows_only_this_tenants_adapters(pages):
    page = pages.client("vera").get(reverse("tenant-adapters", args=["acme"])).content.decode()
    assert reverse("adapter-detail", args=["acme", "support"]) in page
    assert "legal" not in page


def test_adapter_detail_lists_versions_with_their_facts_and_decisions(pages):
    response = pages.client("vera").get(reverse("adapter-detail", args=["acme", "support"]))
    page = response.content.decode()
    for version in (pages.validated, pages.active):
        assert version.served_name in page
        assert f'class="state-{version.status}">{version.status}<' in page
    assert "approve</strong> by rita" in page and "release</strong> by alice" in page
    assert "Release</button>" not in page and "Disable</button>" not in page  # a viewer: no actions
    assert reverse("version-upload", args=["acme", "support"]) not in page


def test_a_rejected_upload_shows_its_error_codes(pages, tmp_path):
    bad = validated(
        pages.world, "bob", pages.world.support, tmp_path, seed=9, base_model_name="other-model"
    )
    assert bad.status == "rejected"
    codes = [e["code"] for e in bad.validation_report["errors"]]
    assert codes
    page = (
        pages.client("bob")
        .get(reverse("adapter-detail", args=["acme", "support"]))
        .content.decode()
    )
    assert all(code in page for code in codes)
    detail = pages.client("bob").get(_url("version-detail", bad)).content.decode()
    assert all(code in detail for code in codes) and "Checks" in detail


def test_version_detail_shows_manifest_report_and_evidence(pages):
    page = pages.client("vera").get(_url("version-detail", pages.active)).content.decode()
    assert pages.active.manifest_sha256 in page
    for f in pages.active.manifest:
        assert f["sha256"] in page
    assert "looks right" in page  # the approval comment
    assert 'data-testid="status">active<' in page


def test_an_owner_releases_a_staged_version(pages):
    version = staged(pages.world, pages.validated)
    response = pages.client("alice").post(_url("version-release", version), {"comment": "ship"})
    assert response.status_code == 302
    assert _status(version) == "active"
    assert Decision.objects.get(version=version, kind="release").comment == "ship"


def test_a_gold_release_needs_a_second_approver(pages):
    pages.world.acme.slo_class = "gold"
    pages.world.acme.save()
    version = staged(pages.world, pages.validated)
    client = pages.client("alice")
    response = client.post(_url("version-release", version), {}, follow=True)
    assert b"second approval" in response.content
    assert _status(version) == "staged"
    again = client.post(_url("version-release", version), {})
    assert again.status_code == 403 and b"release.second_approval_same_user" in again.content
    assert _status(version) == "staged"


def test_a_maintainer_cannot_release(pages):
    version = staged(pages.world, pages.validated)
    response = pages.client("bob").post(_url("version-release", version), {})
    assert response.status_code == 403
    assert b"release.not_owner" in response.content
    assert _status(version) == "staged"


def test_releasing_a_version_that_is_not_staged_is_a_conflict(pages):
    response = pages.client("alice").post(_url("version-release", pages.validated), {})
    assert response.status_code == 409
    assert b"version.bad_transition" in response.content
    assert _status(pages.validated) == "validated"


def test_an_owner_disables_an_active_version(pages):
    response = pages.client("alice").post(_url("version-disable", pages.active), {"reason": "leak"})
    assert response.status_code == 302
    assert _status(pages.active) == "disabled"
    assert Decision.objects.get(version=pages.active, kind="disable").comment == "leak"


def test_owner_sees_actions_where_they_apply(pages):
    version = staged(pages.world, pages.validated)
    page = (
        pages.client("alice")
        .get(reverse("adapter-detail", args=["acme", "support"]))
        .content.decode()
    )
    assert _url("version-release", version) in page
    assert _url("version-disable", pages.active) in page
    assert _url("version-release", pages.active) not in page


def test_the_tenant_page_says_what_its_service_class_means(pages):
    """Service classes (docs/classes.md): the tenant's class with its plan, in words."""
    page = pages.client("alice").get(reverse("tenant-adapters", args=["acme"])).content.decode()
    meaning = page.split('data-testid="class-meaning">', 1)[1].split("</span>", 1)[0]
    assert meaning == "weight 3 of a saturated engine, waits up to 5000 ms, may be shed"

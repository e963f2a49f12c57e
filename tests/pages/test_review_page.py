"""The reviewer queue: validated versions across tenants, approve and reject in place."""

import pytest
from django.urls import reverse

from adapters.models import AdapterVersion, Decision

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def _url(action, version):
    return reverse(
        f"review-{action}", args=[version.tenant.slug, version.adapter.name, version.number]
    )


def _status(version):
    return AdapterVersion.objects.get(pk=version.pk).status


def test_it_lists_validated_versions_of_every_tenant_with_their_evidence(pages):
    response = pages.client("rita").get(reverse("review-queue"))
    page = response.content.decode()
    assert [v.pk for v in response.context["queue"]] == [pages.validated.pk, pages.foreign.pk]
    assert "acme/support v1" in page and "globex/legal v1" in page
    assert pages.validated.manifest_sha256 in page
    assert "<td>bob<div" in page and "<td>charlie<div" in page  # the uploaders
    check_names = [c["name"] for c in pages.validated.validation_report["checks"]]
    assert check_names and all(name in page for name in check_names)
    assert f"acme/support v{pages.active.number}" not in page  # active: not waiting for review


def test_approving_moves_the_version_to_staged_and_swaps_the_row(pages):
    response = pages.client("rob").post(
        _url("approve", pages.validated), {"comment": "fine"}, **HTMX
    )
    assert response.status_code == 200
    assert b"approved" in response.content and b"staged" in response.content
    assert response.content.decode().lstrip().startswith(f'<tr id="review-{pages.validated.pk}"')
    assert _status(pages.validated) == "staged"
    decision = Decision.objects.get(version=pages.validated, kind="approve")
    assert decision.actor == pages.world.users["rob"] and decision.comment == "fine"


def test_a_plain_form_approval_goes_back_to_the_queue(pages):
    client = pages.client("rob")
    response = client.post(_url("approve", pages.validated), {"comment": ""})
    assert response.status_code == 302 and response["Location"] == reverse("review-queue")
    assert _status(pages.validated) == "staged"
    assert b"approved" in client.get(reverse("review-queue")).content


def test_reject_without_a_reason_shows_the_code_and_changes_nothing(pages):
    for headers in (HTMX, {}):
        response = pages.client("rita").post(
            _url("reject", pages.validated), {"reason": "  "}, **headers
        )
        assert response.status_code == 400
        assert b"rejection.reason_required" in response.content
    assert _status(pages.validated) == "validated"
    assert not Decision.objects.filter(version=pages.validated).exists()


def test_reject_with_a_reason_rejects(pages):
    response = pages.client("rita").post(
        _url("reject", pages.foreign), {"reason": "bad data"}, **HTMX
    )
    assert response.status_code == 200 and b"rejected" in response.content
    assert _status(pages.foreign) == "rejected"
    assert Decision.objects.get(version=pages.foreign, kind="reject").comment == "bad data"


def test_the_uploader_cannot_approve_their_own_upload(pages):
    bob = pages.world.users["bob"]
    bob.groups.add(*pages.world.users["rita"].groups.all())
    response = pages.client("bob").post(_url("approve", pages.validated), {}, **HTMX)
    assert response.status_code == 403
    assert b"approval.four_eyes" in response.content
    assert _status(pages.validated) == "validated"


def test_approving_twice_shows_the_conflict(pages):
    pages.client("rita").post(_url("approve", pages.validated), {}, **HTMX)
    response = pages.client("rob").post(_url("approve", pages.validated), {}, **HTMX)
    assert response.status_code == 409
    assert b"version.bad_transition" in response.content
    assert Decision.objects.filter(version=pages.validated, kind="approve").count() == 1


def test_non_reviewers_change_nothing(pages):
    assert pages.client("alice").post(_url("approve", pages.validated), {}).status_code == 403
    assert pages.client("charlie").post(_url("approve", pages.validated), {}).status_code == 404
    assert _status(pages.validated) == "validated"


def test_the_version_page_offers_the_review_only_to_a_reviewer_who_may_give_it(pages):
    # Security class 12: the page asks access.may_review, the rule the approval itself applies
    # (four eyes), so it never offers a form that would only answer approval.four_eyes.
    from django.contrib.auth.models import Group

    pages.world.users["bob"].groups.add(Group.objects.get(name="reviewer"))
    url = reverse("version-detail", args=["acme", "support", pages.validated.number])
    assert b'data-testid="review-forms"' in pages.client("rita").get(url).content
    uploader = pages.client("bob").get(url)  # a reviewer, and the version's uploader
    assert uploader.status_code == 200
    assert b'data-testid="review-forms"' not in uploader.content
    refused = pages.client("bob").post(_url("approve", pages.validated), {"comment": ""}, **HTMX)
    assert b"approval.four_eyes" in refused.content
    assert _status(pages.validated) == "validated"

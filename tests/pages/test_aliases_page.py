"""The aliases page: list, create or replace with weights summing to 100, delete."""

import pytest
from django.urls import reverse

from adapters.models import Alias
from tests.pages.builders import active, validated

pytestmark = pytest.mark.django_db
URL = reverse("tenant-aliases", args=["acme"])


def _targets(alias):
    return {
        (t.version.number, t.weight)
        for t in Alias.objects.get(tenant__slug="acme", name=alias).targets.all()
    }


def test_it_lists_aliases_and_their_targets(pages):
    page = pages.client("vera").get(URL).content.decode()
    assert "prod" in page and f"support@{pages.active.number} <strong>100%</strong>" in page
    assert "Save alias" not in page and "Delete</button>" not in page  # a viewer only reads


def test_a_maintainer_creates_a_canary_split(pages, tmp_path):
    second = active(
        pages.world, validated(pages.world, "bob", pages.world.support, tmp_path, seed=5)
    )
    response = pages.client("bob").post(
        URL,
        {
            "name": "canary",
            "version_0": f"support@{pages.active.number}",
            "weight_0": "90",
            "version_1": f"support@{second.number}",
            "weight_1": "10",
        },
    )
    assert response.status_code == 302
    assert _targets("canary") == {(pages.active.number, 90), (second.number, 10)}


def test_saving_an_existing_name_replaces_its_targets(pages, tmp_path):
    second = active(
        pages.world, validated(pages.world, "bob", pages.world.support, tmp_path, seed=5)
    )
    pages.client("alice").post(
        URL, {"name": "prod", "version_0": f"support@{second.number}", "weight_0": "100"}
    )
    assert _targets("prod") == {(second.number, 100)}


def test_weights_must_add_up_to_100(pages):
    response = pages.client("bob").post(
        URL, {"name": "half", "version_0": f"support@{pages.active.number}", "weight_0": "50"}
    )
    assert response.status_code == 400
    assert b"alias.bad_weights" in response.content
    assert not Alias.objects.filter(name="half").exists()


@pytest.mark.parametrize(
    ("ref", "weight", "code"),
    [
        ("../../etc@1", "100", b"alias.bad_target"),
        ("support@x", "100", b"alias.bad_target"),
        ("support@2", "-50", b"alias.bad_weights"),
        ("support@2", "lots", b"alias.bad_weights"),
    ],
)
def test_malformed_targets_are_refused(pages, ref, weight, code):
    response = pages.client("bob").post(URL, {"name": "junk", "version_0": ref, "weight_0": weight})
    assert response.status_code == 400
    assert code in response.content
    assert not Alias.objects.filter(name="junk").exists()


def test_only_active_versions_can_be_targets(pages):
    response = pages.client("bob").post(
        URL, {"name": "early", "version_0": f"support@{pages.validated.number}", "weight_0": "100"}
    )
    assert response.status_code == 400
    assert b"alias.version_not_active" in response.content


def test_a_maintainer_deletes_an_alias(pages):
    response = pages.client("bob").post(reverse("alias-delete", args=["acme", "prod"]))
    assert response.status_code == 302
    assert not Alias.objects.filter(name="prod").exists()


def test_a_viewer_cannot_change_aliases(pages):
    assert (
        pages.client("vera").post(reverse("alias-delete", args=["acme", "prod"])).status_code == 403
    )
    response = pages.client("vera").post(
        URL, {"name": "prod", "version_0": "support@1", "weight_0": "100"}
    )
    assert response.status_code == 403
    assert _targets("prod") == {(pages.active.number, 100)}


def test_an_unknown_alias_is_not_found(pages):
    assert (
        pages.client("bob").post(reverse("alias-delete", args=["acme", "nope"])).status_code == 404
    )

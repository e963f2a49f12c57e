"""The lifecycle through the API: upload, validate, approve (four eyes), release, disable."""

import pytest

from adapters.models import AdapterVersion, Decision
from portal.audit import verify_chain
from tests.factories import adapter_files, upload

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def uploaded(world, tmp_path, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    response = upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "a"))
    assert response.status_code == 201, response.json()
    return AdapterVersion.objects.get(adapter=world.support, number=1)


def _mark_validated(version):
    from adapters.services.lifecycle import version_record_validation
    from adapters.services.validation import version_claim_for_validation

    assert version_claim_for_validation(version_id=version.pk)
    return version_record_validation(version=version, report={"valid": True, "errors": []}, fields={"rank": 8})


def test_it_uploads_a_version_as_uploaded(world, uploaded):
    assert uploaded.status == "uploaded"
    assert uploaded.served_name.startswith("acme--support--v1-")
    assert {f["name"] for f in uploaded.manifest} == {"adapter_config.json", "adapter_model.safetensors"}


def test_the_uploader_cannot_approve_their_own_version(world, uploaded):
    world.users["bob"].groups.add(*world.users["rita"].groups.all())
    _mark_validated(uploaded)
    response = world.client("bob").post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "approval.four_eyes"
    assert AdapterVersion.objects.get(pk=uploaded.pk).status == "validated"


def test_a_reviewer_approves_and_an_owner_releases(world, uploaded):
    _mark_validated(uploaded)
    response = world.client("rita").post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {"comment": "ok"})
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "staged"
    decision = Decision.objects.get(version=uploaded, kind="approve")
    assert decision.actor == world.users["rita"] and decision.evidence["validation_report"]["valid"] is True
    response = world.client("alice").post("/api/v1/tenants/acme/adapters/support/versions/1/release/", {})
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "active"
    assert verify_chain().ok


def test_approving_twice_is_refused_with_a_clear_error(world, uploaded):
    _mark_validated(uploaded)
    assert world.client("rita").post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {}).status_code == 200
    response = world.client("rob").post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "version.bad_transition"
    assert Decision.objects.filter(version=uploaded, kind="approve").count() == 1


def test_a_maintainer_cannot_release(world, uploaded):
    _mark_validated(uploaded)
    world.client("rita").post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {})
    response = world.client("bob").post("/api/v1/tenants/acme/adapters/support/versions/1/release/", {})
    assert response.status_code == 403
    assert AdapterVersion.objects.get(pk=uploaded.pk).status == "staged"


def test_another_tenants_version_is_not_found(world, uploaded):
    response = world.client("charlie").get("/api/v1/tenants/acme/adapters/support/versions/1/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "tenant.not_found"

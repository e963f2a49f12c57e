"""The lifecycle through the API: upload, validate, approve (four eyes), release, disable."""

import pytest

from adapters.models import AdapterVersion, Decision
from core.audit_models import AuditEvent
from portal.audit_verify import verify_chain
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
    return version_record_validation(
        version=version, report={"valid": True, "errors": []}, fields={"rank": 8}
    )


def test_it_uploads_a_version_as_uploaded(world, uploaded):
    assert uploaded.status == "uploaded"
    assert uploaded.served_name.startswith("acme--support--v1-")
    assert {f["name"] for f in uploaded.manifest} == {
        "adapter_config.json",
        "adapter_model.safetensors",
    }


def test_the_uploader_cannot_approve_their_own_version(world, uploaded):
    world.users["bob"].groups.add(*world.users["rita"].groups.all())
    _mark_validated(uploaded)
    response = world.client("bob").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/approve/", {}
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "approval.four_eyes"
    assert AdapterVersion.objects.get(pk=uploaded.pk).status == "validated"


def test_a_reviewer_approves_and_an_owner_releases(world, uploaded):
    _mark_validated(uploaded)
    response = world.client("rita").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/approve/", {"comment": "ok"}
    )
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "staged"
    decision = Decision.objects.get(version=uploaded, kind="approve")
    assert (
        decision.actor == world.users["rita"]
        and decision.evidence["validation_report"]["valid"] is True
    )
    response = world.client("alice").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/release/", {}
    )
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "active"
    assert verify_chain().ok


def test_approving_twice_is_refused_with_a_clear_error(world, uploaded):
    _mark_validated(uploaded)
    assert (
        world.client("rita")
        .post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {})
        .status_code
        == 200
    )
    response = world.client("rob").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/approve/", {}
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "version.bad_transition"
    assert Decision.objects.filter(version=uploaded, kind="approve").count() == 1


def test_a_maintainer_cannot_release(world, uploaded):
    _mark_validated(uploaded)
    world.client("rita").post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {})
    response = world.client("bob").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/release/", {}
    )
    assert response.status_code == 403
    assert AdapterVersion.objects.get(pk=uploaded.pk).status == "staged"


def test_another_tenants_version_is_not_found(world, uploaded):
    response = world.client("charlie").get("/api/v1/tenants/acme/adapters/support/versions/1/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "tenant.not_found"


def _approve(world, who="rita"):
    return world.client(who).post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {})


def test_a_gold_release_needs_a_second_approval_by_someone_else(world, uploaded):
    world.acme.slo_class = "gold"
    world.acme.save()
    _mark_validated(uploaded)
    assert _approve(world).status_code == 200
    first = world.client("alice").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/release/", {"comment": "go"}
    )
    assert first.status_code == 200
    assert first.json()["status"] == "staged"
    assert [d["kind"] for d in first.json()["decisions"]] == ["approve", "release_approval"]
    again = world.client("alice").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/release/", {}
    )
    assert again.status_code == 403
    assert again.json()["error"]["code"] == "release.second_approval_same_user"
    second = world.client("rob").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/release/", {}
    )
    assert second.status_code == 200, second.json()
    assert second.json()["status"] == "active"


def test_a_reviewer_cannot_start_a_gold_release(world, uploaded):
    world.acme.slo_class = "gold"
    world.acme.save()
    _mark_validated(uploaded)
    _approve(world)
    response = world.client("rob").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/release/", {}
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "release.not_owner"
    assert not Decision.objects.filter(version=uploaded, kind="release_approval").exists()


def test_a_rejection_needs_a_reason_and_keeps_it(world, uploaded):
    _mark_validated(uploaded)
    url = "/api/v1/tenants/acme/adapters/support/versions/1/reject/"
    response = world.client("rita").post(url, {"reason": "  "})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "rejection.reason_required"
    assert AdapterVersion.objects.get(pk=uploaded.pk).status == "validated"
    response = world.client("rita").post(url, {"reason": "weights look poisoned"})
    assert response.status_code == 200
    assert response.json()["status"] == "rejected"
    assert Decision.objects.get(version=uploaded, kind="reject").comment == "weights look poisoned"


def test_a_rejected_version_cannot_be_released_or_approved(world, uploaded):
    _mark_validated(uploaded)
    world.client("rita").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/reject/", {"reason": "no"}
    )
    events_before = AuditEvent.objects.filter(action__startswith="version.").count()
    release = world.client("alice").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/release/", {}
    )
    assert release.status_code == 409
    assert release.json()["error"]["code"] == "version.bad_transition"
    assert "rejected" in release.json()["error"]["message"]
    assert _approve(world, "rob").status_code == 409
    assert AdapterVersion.objects.get(pk=uploaded.pk).status == "rejected"
    assert AuditEvent.objects.filter(action__startswith="version.").count() == events_before
    assert not Decision.objects.filter(version=uploaded, kind__in=["release", "approve"]).exists()


def test_a_version_still_being_validated_cannot_be_approved(world, uploaded):
    response = _approve(world)
    assert response.status_code == 409
    assert response.json()["error"]["details"]["current_status"] == "uploaded"


def test_disable_stops_an_active_version(world, uploaded):
    _mark_validated(uploaded)
    _approve(world)
    world.client("alice").post("/api/v1/tenants/acme/adapters/support/versions/1/release/", {})
    assert (
        world.client("bob")
        .post("/api/v1/tenants/acme/adapters/support/versions/1/disable/", {})
        .status_code
        == 403
    )
    response = world.client("alice").post(
        "/api/v1/tenants/acme/adapters/support/versions/1/disable/", {"reason": "leak"}
    )
    assert response.status_code == 200
    assert response.json()["status"] == "disabled"

"""Security class 1 on the task path: whatever an upload holds, the validation task leaves its
version `validated` or `rejected` with a code, seen through the API as the uploader sees it;
a crash, the soft time limit and runs that keep dying end in verdicts too."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.models import AdapterVersion
from adapters.services import uploads, validation
from adapters.tasks import validate_version
from adapters.validation import CODES
from core.audit_models import AuditEvent
from tests.factories import adapter_files, upload
from tests.validation.hostile_json import configs, headers, weights_with

TASK_CODES = {
    "storage.changed_since_upload",
    "validation.internal_error",
    "validation.timeout",
    "validation.attempts_exhausted",
}


@pytest.fixture
def quiet_world(world, monkeypatch):
    """Uploads commit without enqueueing: the test runs the task itself, like the worker would."""
    monkeypatch.setattr(uploads, "_enqueue_validation", lambda version_id: None)
    world.acme.quota_storage_bytes = 10**12
    world.acme.save()
    return world


def upload_and_validate(world, directory: Path) -> dict:
    """Upload through the API, run the validation task, return the version as the API shows it."""
    client = world.client("bob")
    response = upload(client, "acme", "support", directory)
    if response.status_code == 413:  # over a size cap: refused at the door, also a verdict
        assert response.json()["error"]["code"] == "upload.too_large"
        return {}
    assert response.status_code == 201, response.json()
    number = response.json()["number"]
    validate_version(AdapterVersion.objects.get(adapter=world.support, number=number).pk)
    shown = client.get(f"/api/v1/tenants/acme/adapters/support/versions/{number}/")
    assert shown.status_code == 200
    return shown.json()


def assert_final(shown: dict) -> None:
    if not shown:
        return
    assert shown["status"] in ("validated", "rejected")
    codes = [e["code"] for e in shown["validation_report"]["errors"]]
    assert (shown["status"] == "rejected") == bool(codes)
    assert set(codes) <= set(CODES) | TASK_CODES


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_header_or_config_ends_in_a_final_state(quiet_world, tmp_path_factory, data) -> None:
    directory = adapter_files(tmp_path_factory.mktemp("fuzz"), rank=4)
    if data.draw(st.booleans()):
        config = json.loads((directory / "adapter_config.json").read_text())
        text = data.draw(configs(config))
        (directory / "adapter_config.json").write_bytes(text.encode("utf-8", "surrogatepass"))
    else:
        header = data.draw(headers())
        (directory / "adapter_model.safetensors").write_bytes(weights_with(header, b"\0" * 16))
    assert_final(upload_and_validate(quiet_world, directory))


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"r": 10**30}, "config.invalid_json"),
        ({"r": 10**18}, "config.rank_too_high"),  # the rank column is a 32-bit integer
        ({"r": 2**31}, "config.rank_too_high"),
    ],
)
def test_a_huge_rank_is_rejected_with_a_code_not_a_database_error(
    quiet_world, tmp_path, changes, code
) -> None:
    directory = adapter_files(tmp_path / "a", rank=4, extra_config=changes)
    shown = upload_and_validate(quiet_world, directory)
    assert shown["status"] == "rejected"
    assert code in [e["code"] for e in shown["validation_report"]["errors"]]
    assert AdapterVersion.objects.get(adapter=quiet_world.support).rank is None


def test_a_number_no_column_holds_is_rejected_not_stored(quiet_world, tmp_path) -> None:
    directory = adapter_files(tmp_path / "a", rank=4)
    config = (directory / "adapter_config.json").read_bytes().rstrip()
    (directory / "adapter_config.json").write_bytes(config[:-1] + b', "scale": 1e400}')
    shown = upload_and_validate(quiet_world, directory)
    assert shown["status"] == "rejected"
    assert [e["code"] for e in shown["validation_report"]["errors"]] == ["config.invalid_json"]


def test_a_crash_inside_validation_is_a_verdict(quiet_world, tmp_path, monkeypatch) -> None:
    def crash(*args, **kwargs):
        raise RuntimeError("a bug in a check")

    monkeypatch.setattr(validation, "validate_adapter", crash)
    shown = upload_and_validate(quiet_world, adapter_files(tmp_path / "a"))
    assert shown["status"] == "rejected"
    assert [e["code"] for e in shown["validation_report"]["errors"]] == [
        "validation.internal_error"
    ]
    assert AuditEvent.objects.filter(action="version.validate", object_id="acme/support@1").exists()


def test_the_soft_time_limit_is_a_verdict(quiet_world, tmp_path, monkeypatch) -> None:
    def too_slow(*args, **kwargs):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(validation, "validate_adapter", too_slow)
    shown = upload_and_validate(quiet_world, adapter_files(tmp_path / "a"))
    assert shown["status"] == "rejected"
    assert [e["code"] for e in shown["validation_report"]["errors"]] == ["validation.timeout"]


class WorkerKilled(BaseException):
    """What the hard time limit does to a run: nothing after it executes in that process."""


def test_runs_that_keep_dying_end_in_a_verdict(quiet_world, tmp_path, monkeypatch, settings):
    settings.VALIDATION_MAX_ATTEMPTS = 2

    def killed(*args, **kwargs):
        raise WorkerKilled

    monkeypatch.setattr(validation, "validate_adapter", killed)
    response = upload(quiet_world.client("bob"), "acme", "support", adapter_files(tmp_path / "a"))
    version = AdapterVersion.objects.get(adapter=quiet_world.support)
    for _ in range(2):
        with pytest.raises(WorkerKilled):
            validate_version(version.pk)
        assert AdapterVersion.objects.get(pk=version.pk).status == "validating"
        # The lease runs out; the stalled-validation sweep finds it and enqueues it again.
        AdapterVersion.objects.filter(pk=version.pk).update(
            updated_at=timezone.now() - timedelta(days=1)
        )
        assert validation.stalled_validation_ids() == [version.pk]
    # Between runs the row counts them; the page still says it has no verdict yet.
    page = quiet_world.client("bob").get("/t/acme/a/support/v/1/")
    assert "not validated yet (attempt 2)" in page.content.decode()
    validate_version(version.pk)
    version.refresh_from_db()
    assert response.status_code == 201
    assert version.status == "rejected"
    assert [e["code"] for e in version.validation_report["errors"]] == [
        "validation.attempts_exhausted"
    ]


def test_a_storage_outage_is_retried_and_does_not_count_as_an_attempt(
    quiet_world, tmp_path, monkeypatch
) -> None:
    from adapters.storage import BackendError

    def outage(*args, **kwargs):
        raise BackendError("the store is down")

    monkeypatch.setattr(validation, "validate_adapter", outage)
    upload(quiet_world.client("bob"), "acme", "support", adapter_files(tmp_path / "a"))
    version = AdapterVersion.objects.get(adapter=quiet_world.support)
    for _ in range(5):
        with pytest.raises(validation.TransientValidationFailure):
            validation.run_validation(version_id=version.pk)
    version.refresh_from_db()
    assert (version.status, version.validation_report) == ("uploaded", {})
    monkeypatch.undo()
    finished = validation.run_validation(version_id=version.pk)
    assert finished is not None and finished.status == "validated"

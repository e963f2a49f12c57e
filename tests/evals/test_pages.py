"""The eval gate on the version page (the reviewer's page): criteria against the policy, cases
side by side with regressions first and a tag filter, the override form, and the override shown
in the decisions afterwards."""

from __future__ import annotations

import re

import pytest

from adapters.models import AdapterVersion
from tests.evals.runs import finished_run
from tests.evals.test_gate import MUST_PASS_FAILS

pytestmark = pytest.mark.django_db

PAGE = "/t/acme/a/support/v/1/"
START = "/t/acme/evals/support/1/run/"


def _cases_in_order(html: str) -> list[str]:
    return re.findall(r'data-case="([^"]+)"', html)


def test_the_reviewer_sees_the_gate_and_the_cases_side_by_side_regressions_first(world, gated):
    version, suite = gated
    finished_run(version, suite, MUST_PASS_FAILS)
    html = world.client("rita").get(PAGE).content.decode()
    assert 'data-testid="eval-gate"' in html and "The gate refuses approval." in html
    assert "must-pass cases failed: refund" in html
    assert _cases_in_order(html) == ["refund", "greet", "free"]  # the regression first
    assert "whenever you like" in html and "30 days" in html  # both sides of the regression
    assert 'data-testid="override-form"' in html
    filtered = world.client("rita").get(PAGE, {"tag": "smoke"}).content.decode()
    assert _cases_in_order(filtered) == ["greet"]
    # A member reads the gate too, with no override form (not a reviewer).
    member = world.client("vera").get(PAGE).content.decode()
    assert "The gate refuses approval." in member and 'data-testid="override-form"' not in member


def test_the_override_form_approves_for_a_second_reviewer_and_shows_in_the_decisions(world, gated):
    version, suite = gated
    finished_run(version, suite, MUST_PASS_FAILS)
    url = "/review/acme/support/1/approve/"
    refused = world.client("rita").post(url, {"comment": "ok"})
    assert (
        refused.status_code == 409 and "The eval gate refuses support@1" in refused.content.decode()
    )
    response = world.client("rob").post(url, {"override_eval_gate": "1", "reason": "wording"})
    assert response.status_code == 302
    assert AdapterVersion.objects.get(pk=version.pk).status == "staged"
    html = world.client("vera").get(PAGE).content.decode()
    assert "Eval gate overridden by rob" in html and "“wording”" in html


def test_a_suite_is_uploaded_on_the_evals_page_and_a_bad_line_is_shown_with_its_number(world):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.evals.suites import CASES, jsonl

    url = "/t/acme/evals/"
    bad = jsonl(*CASES) + b'{"id": "x"}\n'
    refused = world.client("bob").post(
        url, {"name": "qa", "file": SimpleUploadedFile("s.jsonl", bad)}
    )
    assert refused.status_code == 400
    assert "Line 4: <code>case.input</code>" in refused.content.decode()
    good = SimpleUploadedFile("s.jsonl", jsonl(*CASES))
    assert world.client("bob").post(url, {"name": "qa", "file": good}).status_code == 302
    page = world.client("vera").get(url).content.decode()
    assert 'data-testid="suites"' in page and "<td>qa</td>" in page


def test_each_recorded_case_tells_the_versions_live_pages(
    world, gated, django_capture_on_commit_callbacks
):
    """The events socket passes `eval.progress` on; pages.js refreshes the eval panel on it."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from core.events import tenant_group
    from evals.services.runs import run_create, run_record_case

    version, suite = gated
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(tenant_group(world.acme.id), channel)
    run = run_create(version=version, suite_version=suite, baseline="base", engines=[])
    with django_capture_on_commit_callbacks(execute=True):
        assert run_record_case(run=run, case=suite.cases[0], side="candidate", answer="hello")
        assert not run_record_case(run=run, case=suite.cases[0], side="candidate", answer="x")
    message = async_to_sync(layer.receive)(channel)
    assert message["event"] == {
        "kind": "eval.progress",
        "version": "support@1",
        "run": 1,
        "status": "running",
    }


def test_the_review_queue_says_where_each_gated_version_stands(world, gated):
    version, suite = gated
    queue = world.client("rita").get("/review/").content.decode()
    assert "Eval gate: no run yet" in queue
    finished_run(version, suite, MUST_PASS_FAILS)
    assert "Eval gate: run 1 failed" in world.client("rita").get("/review/").content.decode()


def test_the_version_page_starts_a_run_for_an_uploader_not_for_a_viewer(world, gated):
    version, _ = gated
    html = world.client("bob").get(PAGE).content.decode()
    assert 'data-testid="eval-run-start"' in html and "No eval run on suite qa@1 yet." in html
    assert 'data-testid="eval-run-start"' not in world.client("vera").get(PAGE).content.decode()
    assert world.client("vera").post(START).status_code == 403
    response = world.client("bob").post(START)
    assert response.status_code == 302 and response["Location"] == PAGE
    run = version.eval_runs.get()
    assert run.status == "queued" and run.started_by == world.users["bob"]
    again = world.client("bob").get(PAGE).content.decode()
    assert "Run 1" in again and 'data-testid="eval-run-start"' not in again  # one at a time

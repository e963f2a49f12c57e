"""`manage.py seed_demo`: the demo world, one adapter released through the real lifecycle and
placed on the demo engine, an inference token for trying the gateway; idempotent."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from adapters.models import AdapterVersion
from workers.models import Residency

pytestmark = pytest.mark.django_db


def test_seed_releases_one_adapter_onto_the_demo_engine_and_is_idempotent(
    settings, tmp_path, tiny_model_dir
):
    settings.DEBUG = True  # seed_demo refuses to run outside debug
    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(tmp_path / "storage")
    settings.VAR_DIR = tmp_path
    settings.ENGINE_ADAPTER_ROOT = str(tmp_path / "engine-adapters")
    first = io.StringIO()
    call_command("seed_demo", "--tiny-dir", str(tiny_model_dir), stdout=first)

    version = AdapterVersion.objects.get(tenant__slug="acme", adapter__name="support", number=1)
    assert version.status == "active"
    row = Residency.objects.get(version=version, engine__name="local-1")
    assert row.desired_state == "registered"  # the release placed it; the worker loads it
    token = (tmp_path / "demo-inference-token").read_text().strip()
    assert token.startswith("lp_") and token in first.getvalue()

    again = io.StringIO()
    call_command("seed_demo", "--tiny-dir", str(tiny_model_dir), stdout=again)
    assert AdapterVersion.objects.filter(adapter__name="support").count() == 3  # @2, @3: below
    assert token in again.getvalue()  # the same token, printed again
    # The cost view's price, set once by the demo's admin (audited), and an auditor to read it.
    from core.audit_models import AuditEvent
    from gateway.models import CostSettings

    assert str(CostSettings.objects.get().price_per_engine_hour) == "2.5000"
    assert AuditEvent.objects.filter(action="cost.settings", actor_label="admin").count() == 1
    assert "/platform/cost/" in again.getvalue()


def test_seed_adds_a_gate_a_waiting_run_and_a_release_plan_on_an_alias(
    settings, tmp_path, tiny_model_dir, django_capture_on_commit_callbacks
):
    from evals.models import EvalPolicy, EvalRun, ReleasePlan

    settings.DEBUG = True
    settings.CELERY_TASK_ALWAYS_EAGER = False  # the run waits for the worker, as under make run
    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(tmp_path / "storage")
    settings.VAR_DIR = tmp_path
    settings.ENGINE_ADAPTER_ROOT = str(tmp_path / "engine-adapters")
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True):  # the gate starts @3's run on commit
        call_command("seed_demo", "--tiny-dir", str(tiny_model_dir), stdout=out)

    statuses = dict(
        AdapterVersion.objects.filter(adapter__name="support").values_list("number", "status")
    )
    assert statuses == {1: "active", 2: "active", 3: "validated"}
    policy = EvalPolicy.objects.get(adapter__name="support")
    assert policy.suite.name == "qa" and policy.live_checks["max_chars"] == 400
    (run,) = EvalRun.objects.filter(version__number=3)
    assert run.status == "queued"  # the worker runs it against the engine; then it waits
    plan = ReleasePlan.objects.get(alias__name="support-bot")
    assert (plan.status, plan.steps, plan.candidate.number) == ("running", [0, 10, 50, 100], 2)
    assert policy.judge == plan.candidate.adapter.base_model.name  # the shadow pairs' judge
    assert "/t/acme/aliases/support-bot/release/" in out.getvalue()

    call_command("seed_demo", "--tiny-dir", str(tiny_model_dir), stdout=io.StringIO())
    assert ReleasePlan.objects.count() == 1 and EvalRun.objects.count() == 1
    assert AdapterVersion.objects.filter(adapter__name="support").count() == 3

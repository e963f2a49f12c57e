"""Release plans (evals.services.release_plans) and their controller
(evals.services.release_controller): the start and its refusals, the controller's decisions on
a step's guards (hold, advance, complete, roll back), one decision per step when two callers
race, a person's pause/resume/advance/rollback, and the live samples' counts."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from adapters.access import AccessContext
from adapters.models import Alias
from core.audit_models import AuditEvent
from core.errors import ApplicationError
from evals.models import (
    PlanStatus,
    ReleaseDecision,
    ReleasePlan,
    ReleaseStep,
)
from evals.services import live_samples, release_controller, release_plans
from evals.tasks import release_plans_tick
from portal.audit_verify import verify_chain
from tests.evals.live_policy import live_checks_policy
from tests.gateway.test_releases import alias_of, measurement, record, targets_of

CHECKS = {"not_contains": ["BANNED"], "max_chars": 2000}


def access(world, who: str = "alice"):
    return AccessContext.for_user(world.users[who])


def with_checks(world, checks=CHECKS) -> None:
    live_checks_policy(tenant=world.acme, adapter=world.support, checks=checks)


def start(world, steps=(5, 50, 100), **kw) -> ReleasePlan:
    kw.setdefault("min_step_seconds", 0)
    kw.setdefault("min_step_samples", 20)
    return release_plans.plan_start(
        access=access(world), alias=alias_of(world), candidate="support@2", steps=list(steps), **kw
    )


def counts(plan: ReleasePlan, *, stable=(0, 0), candidate=(0, 0)) -> None:
    ReleaseStep.objects.filter(plan=plan, index=plan.current_step).update(
        stable_n=stable[0],
        stable_passed=stable[1],
        candidate_n=candidate[0],
        candidate_passed=candidate[1],
    )


def tick(plan: ReleasePlan) -> release_controller.PlanPass:
    return release_controller.plan_tick(plan.pk, client=None, now=time.time())


# --- the start ---


@pytest.mark.django_db
def test_it_starts_at_the_first_steps_weight_with_the_sample_share_on_the_alias(acme):
    world = acme
    plan = start(world, sample_share=0.2)
    alias = alias_of(world)
    assert targets_of(alias) == {"support@1": (95, None), "support@2": (5, None)}
    assert alias.live_sample_share == 0.2
    assert (plan.status, plan.current_step, plan.stable.number) == ("running", 0, 1)
    assert list(plan.step_rows.values_list("index", "weight")) == [(0, 5), (1, 50), (2, 100)]
    assert alias.revisions.latest("number").reason.startswith(f"release plan {plan.pk}")
    assert AuditEvent.objects.filter(action="release_plan.start").count() == 1
    assert AuditEvent.objects.filter(action="alias.release_step").count() == 1


@pytest.mark.parametrize(
    ("steps", "code"),
    [
        ([0, 5, 100], "release.shadow_needs_judge"),  # no judge in the adapter's policy
        ([5, 0, 100], "release.shadow_not_first"),
        ([0, 0, 100], "release.shadow_not_first"),
        ([5, 5, 100], "release.bad_steps"),
        ([50, 25, 100], "release.bad_steps"),
        ([5, 50], "release.bad_steps"),
        ([100], "release.bad_steps"),
        (["5", 100], "release.bad_steps"),
    ],
)
@pytest.mark.django_db
def test_bad_steps_are_refused_and_leave_nothing(acme, steps, code):
    before = (AuditEvent.objects.count(), targets_of(alias_of(acme)))
    with pytest.raises(ApplicationError) as err:
        start(acme, steps=steps)
    assert err.value.code == code
    assert not ReleasePlan.objects.exists()
    assert (AuditEvent.objects.count(), targets_of(alias_of(acme))) == before


@pytest.mark.django_db
def test_a_second_open_plan_and_an_unsettled_alias_are_refused(acme):
    start(acme)
    with pytest.raises(ApplicationError) as err:
        start(acme)
    assert err.value.code == "release.alias_not_settled"  # 95/5: not one stable version
    ReleasePlan.objects.update(status=PlanStatus.PAUSED)
    Alias.objects.filter(pk=alias_of(acme).pk)
    release_plans.plan_rollback(
        access=access(acme), plan=ReleasePlan.objects.get(), reason="test"
    )  # alias back at support@1 alone
    plan = start(acme)
    assert plan.status == "running"
    assert ReleasePlan.objects.count() == 2


@pytest.mark.django_db
def test_a_viewer_may_not_start_or_move_a_plan(acme):
    with pytest.raises(ApplicationError) as err:
        release_plans.plan_start(
            access=access(acme, "vera"), alias=alias_of(acme), candidate="support@2", steps=[5, 100]
        )
    assert err.value.status == 403
    plan = start(acme)
    for act in (release_plans.plan_pause, release_plans.plan_advance, release_plans.plan_rollback):
        with pytest.raises(ApplicationError):
            act(access=access(acme, "vera"), plan=plan)
    assert ReleasePlan.objects.get().status == "running"


@pytest.mark.django_db
def test_a_candidate_that_is_not_active_is_refused(acme):
    with pytest.raises(ApplicationError) as err:
        release_plans.plan_start(
            access=access(acme), alias=alias_of(acme), candidate="support@4", steps=[5, 100]
        )
    assert err.value.code == "alias.version_not_active"


# --- the controller ---


@pytest.mark.django_db
def test_it_holds_while_the_sample_is_too_small(acme):
    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(5, 5), candidate=(5, 0))
    result = tick(plan)
    assert result.decision == "hold" and "too few samples" in result.reason
    step = plan.step_rows.get(index=0)
    assert step.guards["live_checks"]["decision"] == "hold"
    assert step.guards["live_checks"]["candidate"] == {"n": 5, "passed": 0}
    assert ReleaseDecision.objects.count() == 0


@pytest.mark.django_db
def test_it_rolls_back_a_candidate_that_fails_the_live_checks_with_its_numbers(acme):
    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(30, 30), candidate=(30, 2))
    result = tick(plan)
    assert result.decision == "rollback"
    plan.refresh_from_db()
    assert plan.status == "rolled_back" and "live_checks" in plan.reason
    alias = alias_of(acme)
    assert targets_of(alias) == {"support@1": (100, None)}
    assert alias.live_sample_share == 0
    decision = ReleaseDecision.objects.get()
    assert (decision.action, decision.automatic, decision.step) == ("rollback", True, 0)
    assert decision.numbers["candidate"] == {"n": 30, "passed": 2}
    guard = decision.numbers["guards"]["live_checks"]
    assert guard["interval"][1] < 0 and guard["estimate"] == pytest.approx(2 / 30 - 1, abs=1e-3)
    event = AuditEvent.objects.get(action="release_plan.rollback")
    assert event.actor_label == "release-controller"
    assert event.after is not None
    assert event.after["guards"]["live_checks"]["decision"] == "rollback"
    assert verify_chain().ok
    assert tick(plan).decision == "hold"  # a finished plan: nothing more


@pytest.mark.django_db
def test_it_advances_step_by_step_and_completes_at_100(acme):
    with_checks(acme)
    plan = start(acme)
    for expected, weights in (
        ("advance", {"support@1": (50, None), "support@2": (50, None)}),
        ("complete", {"support@2": (100, None)}),
    ):
        plan.refresh_from_db()
        counts(plan, stable=(200, 200), candidate=(200, 199))
        assert tick(plan).decision == expected
        assert targets_of(alias_of(acme)) == weights
    plan.refresh_from_db()
    assert (plan.status, plan.current_step) == ("completed", 2)
    assert alias_of(acme).live_sample_share == 0
    assert list(ReleaseDecision.objects.values_list("step", "action")) == [
        (0, "advance"),
        (1, "complete"),
    ]
    assert list(plan.step_rows.values_list("outcome", flat=True)) == [
        "advance",
        "complete",
        "completed",
    ]


@pytest.mark.django_db
def test_it_holds_a_step_whose_guards_hold_until_its_minimum_time(acme):
    with_checks(acme)
    plan = start(acme, min_step_seconds=600)
    counts(plan, stable=(200, 200), candidate=(200, 200))
    result = tick(plan)
    assert result.decision == "hold" and "of 600 s" in result.reason
    ReleaseStep.objects.filter(plan=plan, index=0).update(
        started_at=timezone.now() - timedelta(seconds=601)
    )
    assert tick(plan).decision == "advance"


@pytest.mark.django_db
def test_two_callers_on_one_step_take_one_decision(acme):
    """A worker that read the plan before another moved it: its claim fails, nothing moves."""
    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(200, 200), candidate=(200, 200))
    seen_by_second = ReleasePlan.objects.select_related(
        "alias__tenant", "stable__adapter", "candidate__adapter"
    ).get(pk=plan.pk)
    assert tick(plan).decision == "advance"
    revisions = alias_of(acme).revisions.count()
    assert (
        release_plans.move_to_next(
            seen_by_second, actor="release-controller", automatic=True, reason="late"
        )
        == ""
    )
    assert not release_plans.roll_back(
        seen_by_second, actor="release-controller", automatic=True, reason="late"
    )
    assert ReleaseDecision.objects.count() == 1
    assert alias_of(acme).revisions.count() == revisions
    assert ReleasePlan.objects.get().current_step == 1


@pytest.mark.django_db
def test_a_candidate_disabled_under_the_plan_is_rolled_back(acme):
    from adapters.models import AdapterVersion

    plan = start(acme)
    AdapterVersion.objects.filter(pk=plan.candidate_id).update(status="disabled")
    result = tick(plan)
    assert (result.decision, result.reason) == ("rollback", "the candidate is disabled")
    assert targets_of(alias_of(acme)) == {"support@1": (100, None)}


@pytest.mark.django_db
def test_a_plan_whose_move_is_refused_does_not_stop_the_others(acme):
    from adapters.models import AdapterVersion

    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(400, 400), candidate=(400, 400))
    # The stable version retired under the plan: the next step cannot give it weight.
    AdapterVersion.objects.filter(pk=plan.stable_id).update(status="retired")
    result = release_controller.plans_tick(client=None)
    assert [(r.plan, r.decision, r.reason) for r in result] == [
        (plan.pk, "", "release.version_not_active")
    ]
    assert ReleasePlan.objects.get().current_step == 0
    assert not ReleaseDecision.objects.exists()


@pytest.mark.django_db
def test_the_task_judges_every_running_plan(acme):
    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(30, 30), candidate=(30, 0))
    result = release_plans_tick()
    assert [(r["plan"], r["decision"]) for r in result] == [(plan.pk, "rollback")]


@pytest.mark.django_db
def test_the_errors_guard_reads_the_gateways_counts_and_rolls_back(private):
    """The canary's engine errors, recorded by the real gateway recorder in Redis."""
    world, t0 = private
    slug = world.acme.slug
    plan = start(world)
    ReleaseStep.objects.filter(plan=plan, index=0).update(
        started_at=datetime.fromtimestamp(t0, UTC)
    )
    record(
        [measurement(slug, "support@2", t0 + 61 + i, ok=i >= 20) for i in range(25)]
        + [measurement(slug, "support@1", t0 + 61 + i % 50, ok=True) for i in range(100)]
    )
    from workers import shared_state

    result = release_controller.plan_tick(plan.pk, client=shared_state.client(), now=t0 + 130)
    assert result.decision == "rollback" and result.reason.startswith("errors:")
    guard = ReleaseDecision.objects.get().numbers["guards"]["errors"]
    assert guard["candidate"] == {"n": 25, "passed": 5}
    assert guard["stable"] == {"n": 100, "passed": 100}


# --- a person's actions ---


@pytest.mark.django_db
def test_pause_stops_the_controller_and_resume_lets_it_act(acme):
    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(200, 200), candidate=(200, 200))
    release_plans.plan_pause(access=access(acme), plan=plan, reason="looking")
    release_plans.plan_pause(access=access(acme), plan=plan)  # again: nothing more
    assert release_controller.plans_tick(client=None) == []
    assert tick(plan).decision == "hold"
    assert ReleasePlan.objects.get().current_step == 0
    release_plans.plan_resume(access=access(acme), plan=plan)
    assert tick(plan).decision == "advance"
    assert list(ReleaseDecision.objects.values_list("action", "automatic")) == [
        ("pause", False),
        ("resume", False),
        ("advance", True),
    ]


@pytest.mark.django_db
def test_a_person_advances_and_rolls_back_by_hand_with_the_figures_recorded(acme):
    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(3, 3), candidate=(3, 3))
    tick(plan)  # the guards' figures: too few samples
    plan = release_plans.plan_advance(access=access(acme), plan=plan, reason="looks fine")
    assert plan.current_step == 1
    assert targets_of(alias_of(acme)) == {"support@1": (50, None), "support@2": (50, None)}
    plan = release_plans.plan_rollback(access=access(acme, "bob"), plan=plan, reason="no")
    assert plan.status == "rolled_back"
    assert targets_of(alias_of(acme)) == {"support@1": (100, None)}
    advance, rollback = ReleaseDecision.objects.order_by("id")
    assert (advance.action, advance.actor_id, advance.automatic) == (
        "advance",
        acme.users["alice"].pk,
        False,
    )
    assert advance.numbers["guards"]["live_checks"]["decision"] == "hold"
    assert (rollback.action, rollback.actor_id, rollback.step) == (
        "rollback",
        acme.users["bob"].pk,
        1,
    )
    with pytest.raises(ApplicationError) as err:
        release_plans.plan_advance(access=access(acme), plan=plan)
    assert err.value.code == "release.plan_finished"


# --- live samples ---


def sample(plan: ReleasePlan, version, text: str, *, at: float | None = None, stream=False):
    if stream:
        body = (
            "".join(
                f"data: {json.dumps({'choices': [{'delta': {'content': part}}]})}\n\n"
                for part in (text[:3], text[3:])
            )
            + "data: [DONE]\n\n"
        )
    else:
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})
    return {
        "alias_id": plan.alias_id,
        "version_id": version.pk,
        "at": time.time() if at is None else at,
        "body": body,
    }


@pytest.mark.django_db
def test_samples_are_scored_into_their_side_of_the_current_step(acme):
    with_checks(acme)
    plan = start(acme)
    stable, candidate = plan.stable, plan.candidate
    counted = live_samples.count_samples(
        [
            sample(plan, stable, "fine"),
            sample(plan, stable, "fine again", stream=True),
            sample(plan, candidate, "this has BANNED in it"),
            sample(plan, candidate, "BANNED, streamed", stream=True),
            sample(plan, candidate, "fine"),
            sample(plan, candidate, "from before the step", at=time.time() - 3600),
            {**sample(plan, candidate, "no plan"), "alias_id": 0},
        ]
    )
    assert counted == 5
    step = plan.step_rows.get(index=0)
    assert (step.stable_n, step.stable_passed) == (2, 2)
    assert (step.candidate_n, step.candidate_passed) == (3, 1)


def test_answer_text_reads_json_and_streams_and_refuses_the_rest():
    assert live_samples.answer_text('{"choices": [{"text": "abc"}]}') == "abc"
    stream = 'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: [DONE]\n\n'
    assert live_samples.answer_text(stream) == "a"
    assert live_samples.answer_text('{"error": {}}') is None
    assert live_samples.answer_text("") is None


# --- the compliance record ---


@pytest.mark.django_db
def test_the_candidates_record_carries_the_plan_its_figures_and_decisions(acme):
    from lora_portal_client.evidence import PinnedKeys, verify_record

    from portal.evidence_check import check_record
    from portal.evidence_signing import portal_keys

    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(30, 30), candidate=(30, 1))
    assert tick(plan).decision == "rollback"
    record = (
        acme.client("alice")
        .get("/api/v1/tenants/acme/adapters/support/versions/2/evidence/")
        .json()
    )
    (entry,) = record["evals"]["release_plans"]
    assert (entry["id"], entry["status"], entry["stable"]) == (plan.pk, "rolled_back", "support@1")
    first = entry["step_rows"][0]
    assert first["samples"]["candidate"] == {"n": 30, "passed": 1}
    assert first["guards"]["live_checks"]["decision"] == "rollback"
    assert first["outcome"] == "rolled_back"
    (decision,) = entry["decisions"]
    assert (decision["action"], decision["actor"]) == ("rollback", "release-controller")
    actions = {e["action"] for e in record["audit_events"]}
    assert {"release_plan.start", "release_plan.rollback", "alias.release_step"} <= actions
    assert verify_record(record, pinned=PinnedKeys.parse(portal_keys())) == []
    assert check_record(record) == []
    # The stable version's record names the plan too, as its stable.
    stable = (
        acme.client("alice")
        .get("/api/v1/tenants/acme/adapters/support/versions/1/evidence/")
        .json()
    )
    assert [(p["id"], p["role"]) for p in stable["evals"]["release_plans"]] == [(plan.pk, "stable")]


# --- kept text and its retention ---


@pytest.mark.django_db
def test_a_plan_that_keeps_text_keeps_prompts_and_answers_until_they_expire(acme):
    from evals.models import ReleaseSample

    with_checks(acme)
    plan = start(acme, keep_text_days=7)
    prompt = [{"role": "user", "content": "Tea?"}]
    live_samples.count_samples(
        [
            {**sample(plan, plan.candidate, "a BANNED word"), "prompt": prompt},
            {**sample(plan, plan.stable, "fine"), "prompt": "plain prompt"},
        ]
    )
    kept = {s.side: s for s in ReleaseSample.objects.all()}
    assert kept["candidate"].answer == "a BANNED word" and not kept["candidate"].passed
    assert kept["candidate"].verdicts["not_contains"]["passed"] is False
    assert json.loads(kept["candidate"].prompt) == prompt
    assert kept["stable"].prompt == "plain prompt" and kept["stable"].passed
    assert kept["stable"].expires_at - kept["stable"].created_at == timedelta(days=7)

    shown = acme.client("bob").get(
        f"/api/v1/tenants/acme/aliases/support-bot/releases/{plan.pk}/samples/"
    )
    assert shown.status_code == 200
    assert {row["answer"] for row in shown.json()["results"]} == {"a BANNED word", "fine"}
    viewer = acme.client("vera").get(
        f"/api/v1/tenants/acme/aliases/support-bot/releases/{plan.pk}/samples/"
    )
    assert viewer.status_code == 403

    ReleaseSample.objects.filter(side="stable").update(expires_at=timezone.now())
    assert live_samples.samples_delete_expired() == 1
    assert list(ReleaseSample.objects.values_list("side", flat=True)) == ["candidate"]
    event = AuditEvent.objects.get(action="release_samples.expire")
    assert event.after is not None and event.after["deleted"] == 1
    assert event.actor_label == "retention"
    assert verify_chain().ok


@pytest.mark.django_db
def test_a_plan_that_keeps_counts_only_writes_no_text(acme):
    from evals.models import ReleaseSample

    with_checks(acme)
    plan = start(acme)
    live_samples.count_samples([{**sample(plan, plan.candidate, "x"), "prompt": "secret"}])
    assert plan.step_rows.get(index=0).candidate_n == 1
    assert not ReleaseSample.objects.exists()
    with pytest.raises(ApplicationError) as err:
        release_plans.plan_rollback(access=access(acme), plan=plan)
        start(acme, keep_text_days=91)
    assert err.value.code == "release.bad_keep_text_days"

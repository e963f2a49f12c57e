"""Shadow steps without an engine: the start's rules, the controller on a shadow step's pairs
(advance, roll back, the figures it keeps), the hand-over from the scored samples with its bound,
the worker's skips that come before any ask (stale, budget), kept pairs through the API and the
page (the tenant's reviewers only; another tenant 404) and their retention."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.models import Budget
from core.errors import ApplicationError
from evals.models import EvalPolicy, ReleasePlan, ReleaseSample, ReleaseStep
from evals.services import live_samples, release_controller, shadow_pairs
from tenants.services.tokens import token_issue
from tests.evals.test_release_plans import access, sample, start, with_checks
from tests.gateway.test_releases import alias_of, targets_of
from workers import shared_state
from workers.redis_contract.keys import BUDGETS_READY, RELEASE_SHADOW

pytestmark = pytest.mark.django_db


def shadow_plan(world, steps=(0, 50, 100), judge="judge-model", **kw) -> ReleasePlan:
    with_checks(world)
    EvalPolicy.objects.filter(adapter=world.support).update(judge=judge)
    return start(world, steps=steps, **kw)


def pairs(plan: ReleasePlan, **counts: int) -> None:
    ReleaseStep.objects.filter(plan=plan, index=plan.current_step).update(pairs=counts)


def tick(plan: ReleasePlan):
    return release_controller.plan_tick(plan.pk, client=None, now=time.time())


@pytest.fixture(name="redis")
def redis_fixture():
    client = shared_state.client()
    client.delete(RELEASE_SHADOW)
    yield client
    client.delete(RELEASE_SHADOW)


def test_a_shadow_first_step_starts_with_the_stable_alone_and_the_share_set(acme):
    plan = shadow_plan(acme, sample_share=0.1)
    assert plan.steps == [0, 50, 100]
    assert targets_of(alias_of(acme)) == {"support@1": (100, None)}
    assert alias_of(acme).live_sample_share == 0.1


def test_a_shadow_step_needs_the_policys_judge_and_leaves_nothing_without_it(acme):
    with_checks(acme)
    with pytest.raises(ApplicationError) as err:
        start(acme, steps=[0, 100])
    assert err.value.code == "release.shadow_needs_judge"
    assert "judge" in err.value.message
    assert not ReleasePlan.objects.exists()


def test_the_controller_advances_a_shadow_step_on_pairs_the_candidate_does_not_lose(acme):
    plan = shadow_plan(acme, min_step_samples=50)
    pairs(plan, tie=60, split=20, win=1)
    # The live checks on the candidate's shadow answers against the stable's sampled ones.
    ReleaseStep.objects.filter(plan=plan, index=0).update(
        stable_n=80, stable_passed=80, candidate_n=81, candidate_passed=81
    )
    result = tick(plan)
    assert result.decision == "advance", result
    plan.refresh_from_db()
    assert plan.current_step == 1
    assert targets_of(alias_of(acme)) == {"support@1": (50, None), "support@2": (50, None)}
    decision = plan.decisions.get()
    assert decision.numbers["pairs"] == {"tie": 60, "split": 20, "win": 1}
    guard = decision.numbers["guards"]["pairs"]
    assert guard["decision"] == "advance" and guard["candidate"]["n"] == 81
    assert guard["interval"][0] > -0.05


def test_the_controller_holds_on_too_few_pairs_and_rolls_back_a_candidate_that_loses(acme):
    plan = shadow_plan(acme, min_step_samples=20)
    pairs(plan, loss=9)
    assert tick(plan).decision == "hold"  # below the floor of 10 pairs
    pairs(plan, loss=12, tie=2, unreadable=1)
    result = tick(plan)
    assert result.decision == "rollback", result
    plan.refresh_from_db()
    assert plan.status == "rolled_back" and plan.reason.startswith("pairs:")
    assert targets_of(alias_of(acme)) == {"support@1": (100, None)}
    assert alias_of(acme).live_sample_share == 0


def test_the_stables_samples_are_handed_over_within_the_backlog_and_the_rest_counted(
    acme, redis, settings
):
    settings.RELEASE_SHADOW_BACKLOG = 2
    plan = shadow_plan(acme)
    prompt = [{"role": "user", "content": "Tea?"}]
    samples = [
        {**sample(plan, plan.stable, f"answer {i}"), "prompt": prompt, "params": {"max_tokens": 5}}
        for i in range(3)
    ]
    live_samples.count_samples(samples, client=redis)
    step = plan.step_rows.get(index=0)
    assert (step.stable_n, step.stable_passed) == (3, 3)  # the live checks count them too
    assert step.shadow_skipped == {"backlog": 1}
    handed = [json.loads(x) for x in redis.lrange(RELEASE_SHADOW, 0, -1)]
    assert [(h["plan"], h["step"], h["stable"]) for h in handed] == [
        (plan.pk, 0, "answer 0"),
        (plan.pk, 0, "answer 1"),
    ]
    assert handed[0]["prompt"] == prompt and handed[0]["params"] == {"max_tokens": 5}


def test_a_weighted_step_hands_nothing_over(acme, redis):
    with_checks(acme)
    plan = start(acme)  # 5 %: callers see the candidate, no shadow
    live_samples.count_samples([sample(plan, plan.stable, "fine")], client=redis)
    assert redis.llen(RELEASE_SHADOW) == 0


def shadow_item(
    plan: ReleasePlan, *, at: float | None = None, max_tokens: int = 8, token_id: int | None = None
) -> str:
    return json.dumps(
        {
            "plan": plan.pk,
            "step": 0,
            "at": time.time() if at is None else at,
            "prompt": [{"role": "user", "content": "Tea?"}],
            "params": {"max_tokens": max_tokens, "temperature": 0},
            "stable": "Tea is a drink.",
            "token_id": token_id,
        }
    )


def test_a_request_that_waited_too_long_is_skipped_as_stale_and_never_asked(acme, redis):
    plan = shadow_plan(acme)
    redis.rpush(RELEASE_SHADOW, shadow_item(plan, at=time.time() - 3600))
    assert shadow_pairs.pairs_ask(client=redis) == {"stale": 1}
    step = plan.step_rows.get(index=0)
    assert step.shadow_skipped == {"stale": 1} and not step.pairs and step.candidate_n == 0
    assert redis.llen(RELEASE_SHADOW) == 0


def test_a_budget_without_room_above_the_live_share_skips_the_pair_before_asking(acme, redis):
    plan = shadow_plan(acme)
    redis.set(BUDGETS_READY, "1")
    # 200 tokens: a live request of this size (about 70 at worst) still fits; a pair (its three
    # asks' worst cases) above the share kept for live traffic does not.
    Budget.objects.create(tenant=acme.acme, scope="alias:support-bot", tokens=200)
    redis.rpush(RELEASE_SHADOW, shadow_item(plan), shadow_item(plan))
    assert shadow_pairs.pairs_ask(client=redis) == {"budget": 2}
    step = plan.step_rows.get(index=0)
    assert step.shadow_skipped == {"budget": 2} and not step.pairs


def test_the_callers_token_goes_with_the_stables_request_and_its_budget_skips_the_pair(acme, redis):
    plan = shadow_plan(acme)
    token = token_issue(access=access(acme), scopes=["inference"], tenant=acme.acme).token
    live_samples.count_samples(
        [{**sample(plan, plan.stable, "fine"), "prompt": "Tea?", "token_id": token.pk}],
        client=redis,
    )
    (handed,) = [json.loads(x) for x in redis.lrange(RELEASE_SHADOW, 0, -1)]
    assert handed["token_id"] == token.pk
    redis.set(BUDGETS_READY, "1")
    # The token's budget alone is short (the tenant and the alias have none): the pairs asked
    # through that token are skipped before asking, as for the other scopes.
    Budget.objects.create(tenant=acme.acme, scope=f"token:{token.pk}", tokens=200)
    redis.rpush(RELEASE_SHADOW, shadow_item(plan, token_id=token.pk))
    assert shadow_pairs.pairs_ask(client=redis) == {"budget": 2}
    step = plan.step_rows.get(index=0)
    assert step.shadow_skipped == {"budget": 2} and not step.pairs


def test_a_moved_plans_requests_are_dropped_uncounted(acme, redis):
    plan = shadow_plan(acme)
    ReleasePlan.objects.filter(pk=plan.pk).update(current_step=1)
    redis.rpush(RELEASE_SHADOW, shadow_item(plan))
    assert shadow_pairs.pairs_ask(client=redis) == {}
    assert plan.step_rows.get(index=0).shadow_skipped == {}


def kept_pair(plan: ReleasePlan, **kw) -> ReleaseSample:
    now = timezone.now()
    fields = {
        "tenant_id": plan.tenant_id,
        "plan": plan,
        "step": 0,
        "side": "pair",
        "passed": False,
        "verdicts": {},
        "prompt": "Tea?",
        "answer": "candidate's shadow answer",
        "stable_answer": "stable's answer",
        "judgement": {"outcome": "loss", "candidate_first": "B", "candidate_second": "A"},
        "created_at": now,
        "expires_at": now + timedelta(days=1),
        **kw,
    }
    return ReleaseSample.objects.create(**fields)


def test_kept_pairs_are_the_reviewers_and_another_tenants_plan_is_not_found(acme):
    plan = shadow_plan(acme, keep_text_days=1)
    kept_pair(plan)
    url = f"/api/v1/tenants/acme/aliases/support-bot/releases/{plan.pk}/samples/"
    shown = acme.client("bob").get(url)
    assert shown.status_code == 200
    (row,) = shown.json()["results"]
    assert (row["side"], row["answer"], row["stable_answer"]) == (
        "pair",
        "candidate's shadow answer",
        "stable's answer",
    )
    assert row["judgement"]["outcome"] == "loss"
    assert acme.client("vera").get(url).status_code == 403
    assert acme.client("charlie").get(url).status_code == 404
    plan_body = acme.client("vera").get(url.removesuffix("samples/")).json()
    assert plan_body["step_rows"][0]["shadow"] == {
        "pairs": {},
        "pairs_n": 0,
        "skipped": {},
        "skipped_n": 0,
    }
    assert plan_body["step_rows"][1]["shadow"] is None

    page = "/t/acme/aliases/support-bot/release/"
    reviewer = acme.client("bob").get(page).content.decode()
    assert "Kept shadow pairs" in reviewer and "candidate&#x27;s shadow answer" in reviewer
    viewer = acme.client("vera").get(page).content.decode()
    assert "Shadow pairs judged: 0" in viewer and "shadow answer" not in viewer


def test_the_retention_job_deletes_kept_pairs(acme):
    plan = shadow_plan(acme, keep_text_days=1)
    kept_pair(plan, expires_at=timezone.now())
    kept_pair(plan)
    assert live_samples.samples_delete_expired() == 1
    assert ReleaseSample.objects.filter(side="pair").count() == 1


def test_a_viewer_may_not_start_a_shadow_plan(acme):
    with_checks(acme)
    EvalPolicy.objects.filter(adapter=acme.support).update(judge="judge-model")
    from evals.services import release_plans

    with pytest.raises(ApplicationError):
        release_plans.plan_start(
            access=access(acme, "vera"), alias=alias_of(acme), candidate="support@2", steps=[0, 100]
        )
    assert not ReleasePlan.objects.exists()

"""Shadow pairs end to end on real engines: live requests through the real gateway on an alias
whose plan is in its shadow step, the stable's answers sampled after each reply, the same requests
asked again of the candidate in the background lane (through the real Celery worker, or a pass
of the shadow worker in this process), each pair judged in both orders, and the controller
deciding on the pairs. Callers only ever get the stable's answers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from budgets.models import Budget, BudgetSpend
from budgets.rebuild import rebuild_counts
from evals.models import EvalPolicy, ReleasePlan, ReleaseSample, ReleaseStep
from evals.services import live_samples, release_controller, release_plans, shadow_pairs
from evals.tasks import ask_shadow_pairs
from gateway.usage import usage_key
from tenants.services.tokens import token_issue
from tests.evals.judge_double import NAME as JUDGE_DOUBLE
from tests.evals.judge_double import judge_double
from tests.evals.live_policy import live_checks_policy
from tests.gateway.test_releases import alias_of, targets_of
from tests.workers.conftest import worker_fleet  # noqa: F401 - the fixture
from workers import shared_state
from workers.models import Engine, EngineState
from workers.redis_contract.keys import RELEASE_SAMPLES, RELEASE_SHADOW, load_key

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _pairs_do_not_go_stale_under_load(settings):
    """These tests count pairs asked in passes run here: under a loaded machine the engines'
    answers may take longer than RELEASE_SHADOW_MAX_AGE_SECONDS (30 s) to reach the last of a
    dozen samples, which would then be skipped as `stale` (tests/evals/test_shadow_pairs.py
    tests that rule)."""
    settings.RELEASE_SHADOW_MAX_AGE_SECONDS = 3600


@pytest.fixture(autouse=True)
def _passes_at_the_tests_priority(settings):
    """A pass runs at EVAL_RUN_NICE lower priority (tests/evals/test_run_priority.py tests that):
    on a machine whose cores are all busy at normal priority, a nice-19 thread can wait past the
    gateway's Redis connect timeout, and the pass's pairs then count as `error`, not as what these
    tests look for."""
    settings.EVAL_RUN_NICE = 0


PROMPT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something about tea."}]
MAX_TOKENS = 6


def until(condition: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def fresh_budget(redis: Any, **fields: Any) -> Budget:
    """A budget whose window starts empty in Redis (an earlier test's budget may have had its id)."""
    budget = Budget.objects.create(**fields)
    stale = list(redis.scan_iter(f"lp:gw:budget:{budget.pk}:*"))
    if stale:
        redis.delete(*stale)
    return budget


class Setup:
    """Stable and candidate on real engines, the alias on the stable, a policy naming `judge`."""

    def __init__(self, fleet: Any, gateway: str, tmp_path: Any, *, judge: str, seeds=(461, 462)):
        from tests.workers.fleet import servable_version

        self.world = world = fleet.world
        self.alice = AccessContext.for_user(world.users["alice"])
        self.stable = servable_version(world.support, tmp_path, seed=seeds[0])
        self.candidate = servable_version(world.support, tmp_path, seed=seeds[1])
        token = token_issue(access=self.alice, scopes=["inference"], tenant=world.acme)
        self.token = token.token  # the live calls' API token (its budgets count the pairs too)
        self.client = openai.OpenAI(
            base_url=gateway + "/v1", api_key=token.plaintext, max_retries=0
        )
        live_checks_policy(tenant=world.acme, adapter=world.support, checks={"max_chars": 4000})
        EvalPolicy.objects.filter(adapter=world.support).update(judge=judge)
        alias_set(
            access=self.alice,
            tenant=world.acme,
            name="support-bot",
            targets=[{"version": f"support@{self.stable.number}", "weight": 100}],
        )
        self.redis = shared_state.client()
        self.redis.delete(RELEASE_SAMPLES, RELEASE_SHADOW)

    def ask(self, model: str = "support-bot", max_tokens: int = MAX_TOKENS) -> tuple[str, str]:
        reply = self.client.chat.completions.create(
            model=model, messages=PROMPT, max_tokens=max_tokens, temperature=0
        )
        return reply.model, reply.choices[0].message.content or ""

    def start(self, **kw: Any) -> ReleasePlan:
        kw.setdefault("min_step_seconds", 0)
        kw.setdefault("min_step_samples", 10)
        kw.setdefault("sample_share", 1.0)
        return release_plans.plan_start(
            access=self.alice,
            alias=alias_of(self.world),
            candidate=f"support@{self.candidate.number}",
            **kw,
        )

    def step(self, plan: ReleasePlan) -> ReleaseStep:
        return ReleaseStep.objects.get(plan=plan, index=0)

    def live_answers(self, n: int) -> list[tuple[str, str]]:
        return [self.ask() for _ in range(n)]

    def hand_over(self, plan: ReleasePlan, n: int) -> None:
        """Score the samples until `n` of the stable's are handed to the shadow worker (or
        skipped)."""

        def handed() -> bool:
            live_samples.samples_score(client=self.redis)
            step = self.step(plan)
            return step.stable_n >= n

        until(handed, timeout=60, what=f"{n} stable samples scored")


def test_a_shadow_step_judges_pairs_on_a_real_engine_and_the_controller_advances(
    worker_fleet,  # noqa: F811
    gateway_server,
    tmp_path,
):
    s = Setup(worker_fleet, gateway_server, tmp_path, judge=worker_fleet.world.base.name)
    _, stable_answer = s.ask(f"support@{s.stable.number}")
    _, candidate_answer = s.ask(f"support@{s.candidate.number}")
    assert candidate_answer != stable_answer, "the two versions must answer apart"
    budget = fresh_budget(s.redis, tenant=s.world.acme, scope="tenant", tokens=10_000_000)
    by_token = fresh_budget(
        s.redis, tenant=s.world.acme, scope=f"token:{s.token.pk}", tokens=10_000_000
    )
    rebuild_counts()
    # The judge is the tiny base model (its choices are random): a wide margin lets an equal
    # enough candidate advance on a few pairs; the guard's statistics are tested on their own.
    plan = s.start(steps=[0, 100], keep_text_days=1, margin=0.9)
    assert targets_of(alias_of(s.world)) == {f"support@{s.stable.number}": (100, None)}

    replies = s.live_answers(14)
    # The caller never sees the candidate: every reply is the stable's, its own answer.
    assert {model for model, _ in replies} == {s.stable.served_name}
    assert {text for _, text in replies} == {stable_answer}
    s.hand_over(plan, 14)
    spent_live = sum(BudgetSpend.objects.filter(budget=budget).values_list("tokens", flat=True))
    token_live = sum(BudgetSpend.objects.filter(budget=by_token).values_list("tokens", flat=True))

    def judged() -> int:
        ask_shadow_pairs.delay()  # the real worker's pass
        time.sleep(1)
        return sum(s.step(plan).pairs.values())

    until(lambda: judged() >= 10, timeout=240, what="10 judged pairs from the worker")
    step = s.step(plan)
    assert set(step.pairs) <= {"win", "tie", "split", "loss", "unreadable"}, step.pairs
    assert step.candidate_n >= 10 and step.candidate_passed == step.candidate_n  # max_chars
    kept = ReleaseSample.objects.filter(plan=plan, side="pair")
    assert kept.count() >= 10
    pair = kept.order_by("id")[0]
    assert (pair.answer, pair.stable_answer) == (candidate_answer, stable_answer)
    assert pair.judgement["outcome"] in step.pairs
    assert {pair.judgement["candidate_first"], pair.judgement["candidate_second"]} <= {
        "A",
        "B",
        "TIE",
    }
    # The shadow tokens: labelled in the tenant's usage and counted against its budget.
    usage = s.redis.hgetall(usage_key(datetime.now(UTC).date()))
    shadow_field = f"{s.world.acme.pk}|{s.candidate.pk}|shadow_requests".encode()
    assert int(usage.get(shadow_field, 0)) >= 10, usage
    spent = sum(BudgetSpend.objects.filter(budget=budget).values_list("tokens", flat=True))
    assert spent > spent_live
    # And against the budget of the token that asked the stable, by as much (the same pairs).
    token_spent = sum(BudgetSpend.objects.filter(budget=by_token).values_list("tokens", flat=True))
    assert token_spent - token_live == spent - spent_live > 0

    result = release_controller.plan_tick(plan.pk, client=s.redis, now=time.time())
    assert result.decision == "complete", result
    plan.refresh_from_db()
    assert plan.status == "completed"
    decision = plan.decisions.get(action="complete")
    assert decision.numbers["guards"]["pairs"]["decision"] == "advance"
    assert sum(decision.numbers["pairs"].values()) >= 10
    assert targets_of(alias_of(s.world)) == {f"support@{s.candidate.number}": (100, None)}


def test_a_candidate_that_loses_its_pairs_is_rolled_back(
    worker_fleet,  # noqa: F811
    gateway_server,
    tmp_path,
):
    s = Setup(worker_fleet, gateway_server, tmp_path, judge=JUDGE_DOUBLE, seeds=(463, 464))
    _, candidate_answer = s.ask(f"support@{s.candidate.number}")
    with judge_double(disliked=candidate_answer) as double:
        plan = s.start(steps=[0, 50, 100])
        s.live_answers(12)
        s.hand_over(plan, 12)

        def judged() -> bool:
            shadow_pairs.pairs_ask(client=s.redis)
            return sum(s.step(plan).pairs.values()) >= 10

        until(judged, timeout=120, what="10 judged pairs")
        assert len(double.asked) >= 20  # both orders of every pair
        assert all(
            d.get("structured_outputs") == {"choice": ["A", "B", "TIE"]} for d in double.asked
        )
    step = s.step(plan)
    assert step.pairs == {"loss": step.pairs["loss"]} and step.pairs["loss"] >= 10, step.pairs
    result = release_controller.plan_tick(plan.pk, client=s.redis, now=time.time())
    assert result.decision == "rollback", result
    plan.refresh_from_db()
    assert plan.status == "rolled_back" and "pairs:" in plan.reason
    assert targets_of(alias_of(s.world)) == {f"support@{s.stable.number}": (100, None)}
    # The plan kept counts only: no text of a pair was written.
    assert not ReleaseSample.objects.filter(plan=plan).exists()


def test_no_room_in_the_lane_skips_the_pair_and_live_calls_are_unaffected(
    worker_fleet,  # noqa: F811
    gateway_server,
    tmp_path,
    settings,
):
    s = Setup(
        worker_fleet, gateway_server, tmp_path, judge=worker_fleet.world.base.name, seeds=(465, 466)
    )
    # One engine serves (the other drained), and while a live request runs there, no background
    # request fits (the headroom kept for live traffic is all of its slots).
    Engine.objects.filter(pk=worker_fleet.b.pk).update(state=EngineState.DRAINING)
    settings.GATEWAY_LIVE_HEADROOM = 10_000
    plan = s.start(steps=[0, 100])
    s.live_answers(4)
    s.hand_over(plan, 4)
    assert s.redis.llen(RELEASE_SHADOW) == 4

    answers: list[str] = []
    stop = threading.Event()

    def live_load() -> None:
        while not stop.is_set():
            answers.append(s.ask(max_tokens=400)[1])

    threads = [threading.Thread(target=live_load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        engine = worker_fleet.a.name
        until(
            lambda: int(s.redis.hget(load_key(engine), "live") or 0) > 0,
            timeout=30,
            what="live requests in flight on the engine",
        )
        report = shadow_pairs.pairs_ask(client=s.redis)
    finally:
        stop.set()
        for t in threads:
            t.join()
    step = s.step(plan)
    assert step.shadow_skipped.get("no_room", 0) >= 1, (report, step.shadow_skipped)
    assert not step.pairs
    # Skipped, never queued: nothing waits for room on the list.
    assert s.redis.llen(RELEASE_SHADOW) == 4 - sum(report.values())
    assert answers and all(answers), "live calls answered meanwhile"


def test_an_exhausted_budget_skips_the_pair_and_live_calls_are_still_answered(
    worker_fleet,  # noqa: F811
    gateway_server,
    tmp_path,
):
    s = Setup(
        worker_fleet, gateway_server, tmp_path, judge=worker_fleet.world.base.name, seeds=(467, 468)
    )
    rebuild_counts()
    plan = s.start(steps=[0, 100])
    # Room for a few live requests' worst cases, not for a pair's above the share kept for live.
    budget = fresh_budget(s.redis, tenant=s.world.acme, scope="alias:support-bot", tokens=300)

    def settled() -> bool:
        """The live requests' worst cases given back (the gateway settles in batches, every
        GATEWAY_BUDGET_SETTLE_SECONDS): 300 tokens hold one live request's worst case at a time."""
        windows = s.redis.scan_iter(f"lp:gw:budget:{budget.pk}:*")
        return all(int(s.redis.hget(key, "reserved") or 0) == 0 for key in windows)

    replies = []
    for _ in range(4):
        replies.append(s.ask())
        until(settled, timeout=30, what="the live request's budget reservation settled")
    assert {model for model, _ in replies} == {s.stable.served_name}
    s.hand_over(plan, 4)
    report = shadow_pairs.pairs_ask(client=s.redis)
    step = s.step(plan)
    assert step.shadow_skipped.get("budget", 0) == 4, (report, step.shadow_skipped)
    assert not step.pairs and step.candidate_n == 0
    # Live traffic goes on under its own budget rule, as before.
    assert s.ask()[0] == s.stable.served_name

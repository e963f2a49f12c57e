"""A release plan end to end on real engines: live requests through the real gateway on an alias
with a plan, a share of the answers sampled after each reply and handed to Redis, scored with
the adapter's live checks, and a candidate whose greedy answers fail them rolled back by the
controller, while an equal candidate's samples pass."""

from __future__ import annotations

import time

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from evals.models import ReleaseDecision, ReleasePlan
from evals.services import live_samples, release_controller, release_plans
from tenants.services.tokens import token_issue
from tests.evals.live_policy import live_checks_policy
from tests.gateway.test_releases import alias_of, targets_of
from tests.workers.conftest import worker_fleet  # noqa: F401 - the fixture
from workers import shared_state
from workers.redis_contract.keys import RELEASE_SAMPLES

PROMPT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something about tea."}]
MAX_TOKENS = 6


def until(condition, *, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.engine
@pytest.mark.django_db(transaction=True)
def test_a_candidate_failing_the_live_checks_is_rolled_back_from_sampled_live_answers(
    worker_fleet,  # noqa: F811
    gateway_server,
    tmp_path,
):
    from tests.workers.fleet import servable_version

    world = worker_fleet.world
    alice = AccessContext.for_user(world.users["alice"])
    stable = servable_version(world.support, tmp_path, seed=451)
    candidate = servable_version(world.support, tmp_path, seed=452)
    token = token_issue(access=alice, scopes=["inference"], tenant=world.acme)
    client = openai.OpenAI(base_url=gateway_server + "/v1", api_key=token.plaintext, max_retries=0)

    def ask(model: str) -> tuple[str, str]:
        reply = client.chat.completions.create(
            model=model, messages=PROMPT, max_tokens=MAX_TOKENS, temperature=0
        )
        return reply.model, reply.choices[0].message.content or ""

    # Greedy answers are deterministic: the candidate's own answer is the marker its live check
    # bans, which the stable's answer does not contain.
    _, stable_answer = ask(f"support@{stable.number}")
    _, candidate_answer = ask(f"support@{candidate.number}")
    assert candidate_answer and candidate_answer not in stable_answer, (
        stable_answer,
        candidate_answer,
    )
    live_checks_policy(
        tenant=world.acme, adapter=world.support, checks={"not_contains": [candidate_answer]}
    )
    alias_set(
        access=alice,
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": f"support@{stable.number}", "weight": 100}],
    )
    redis = shared_state.client()
    redis.delete(RELEASE_SAMPLES)
    plan = release_plans.plan_start(
        access=alice,
        alias=alias_of(world),
        candidate=f"support@{candidate.number}",
        steps=[50, 100],
        min_step_seconds=0,
        min_step_samples=10,
        sample_share=1.0,
    )
    # The gateway re-reads its tables on the alias's change: the plan's weights and share.
    served = {stable.served_name: 0, candidate.served_name: 0}

    def enough() -> bool:
        model, _ = ask("support-bot")
        served[model] += 1
        return min(served.values()) >= 12

    until(enough, timeout=180, what=f"12 answers from each side, got {served}")

    def scored() -> bool:
        live_samples.samples_score(client=redis)
        step = plan.step_rows.get(index=0)
        return step.stable_n >= 12 and step.candidate_n >= 12

    until(scored, timeout=30, what="the samples to reach Redis and be scored")
    step = plan.step_rows.get(index=0)
    assert (step.stable_passed, step.candidate_passed) == (step.stable_n, 0)

    result = release_controller.plan_tick(plan.pk, client=redis, now=time.time())
    assert result.decision == "rollback", result
    plan.refresh_from_db()
    assert plan.status == "rolled_back"
    assert targets_of(alias_of(world)) == {f"support@{stable.number}": (100, None)}
    decision = ReleaseDecision.objects.get(plan=plan)
    assert decision.numbers["guards"]["live_checks"]["decision"] == "rollback"
    assert not ReleasePlan.objects.filter(status="running").exists()

    # Back on the stable alone, and no longer sampled.
    assert alias_of(world).live_sample_share == 0
    until(
        lambda: all(ask("support-bot")[0] == stable.served_name for _ in range(5)),
        timeout=30,
        what="the gateway to serve the stable alone",
    )

"""The gateway overhead benchmark's budgets variant (`--budgets`): a request through its alias
comes under a budget on every scope it has, and the report renders without LiteLLM."""

from __future__ import annotations

import pytest

from adapters.access import AccessContext
from bench import gateway_overhead as overhead
from bench import gateway_support as gs
from budgets.rules import load_rules
from tenants.models import ApiToken
from tenants.services.tokens import token_issue
from tests.bench.test_gateway_bench_report import _overhead
from tests.factories import build_world
from tests.workers.fleet import servable_version


@pytest.mark.django_db
def test_the_gateways_requests_come_under_a_budget_on_every_scope(tmp_path, settings):
    settings.ADAPTER_STORAGE_BACKEND, settings.ADAPTER_STORAGE_ROOT = "local", str(tmp_path)
    world = build_world()
    servable_version(world.support, tmp_path, seed=1)  # support@1, active
    alice = world.users["alice"]
    token = token_issue(
        access=AccessContext.for_user(alice), scopes=["inference"], tenant=world.acme
    )
    ApiToken.objects.filter(tenant=world.acme).exclude(pk=token.token.pk).delete()
    tenancy = gs.Tenancy(world.acme, alice, token.plaintext, world.base)
    model = overhead.seed_budgets(tenancy)
    applying = load_rules().applying(world.acme.pk, token.token.pk, model)
    assert sorted(rule.window for rule in applying) == ["day", "month", "week"]
    assert len({rule.id for rule in applying}) == 3


def test_without_litellm_the_report_keeps_the_gateways_goals_only():
    result = _overhead(gateway_add=0.8, gateway_cpu=2.0)
    result.latency = {
        kind: {name: s for name, s in per.items() if name != "litellm"}
        for kind, per in result.latency.items()
    }
    result.throughput = [t for t in result.throughput if t.target != "litellm"]
    result.litellm_version, result.budgets = "", True
    goals = [goal for goal, *_ in result.goals()]
    assert goals and not any("LiteLLM" in goal for goal in goals)
    section = overhead.render(result, "python -m bench.gateway_overhead --budgets")
    assert "under a budget on every scope" in section and "LiteLLM not run" in section

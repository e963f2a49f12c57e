"""Money beside a budget's tokens, in the API's detail and on the budgets page: the weighted tokens
at the price card of the base model the scope reaches, rounded to cents as the cost view rounds;
nothing when there is no price card, or when the scope's base models are priced differently."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from adapters.models import Adapter, Alias, AliasTarget, BaseModel
from budgets import clock
from budgets.models import Budget, PriceCard
from tests.budgets.spending import clear_budget_counts, spend
from tests.factories import build_world
from tests.workers.fleet import servable_version

pytestmark = pytest.mark.django_db

URL = "/api/v1/tenants/acme/budgets/"


@pytest.fixture
def world():
    clear_budget_counts()
    return build_world()


@pytest.fixture
def budget(world):
    made = Budget.objects.create(tenant=world.acme, scope="tenant", tokens=10_000, window="month")
    spend(made, 6_000, clock.now())
    return made


def _detail(world, budget):
    return world.client("vera").get(f"{URL}{budget.pk}/").json()


def _page(world) -> str:
    return world.client("vera").get("/t/acme/budgets/").content.decode()


def test_without_a_price_card_no_money_is_shown(world, budget):
    assert _detail(world, budget)["money"] is None
    assert 'data-testid="money"' not in _page(world)


def test_the_price_card_puts_money_beside_the_tokens(world, budget):
    PriceCard.objects.create(
        base_model=world.base,
        price_per_million=Decimal("50"),
        completion_weight=Decimal("3"),
        currency="EUR",
    )
    money = _detail(world, budget)["money"]
    assert money == {
        "currency": "EUR",
        "price_per_million": "50.0000",
        "prompt_weight": "1.0000",
        "completion_weight": "3.0000",
        "limit": 0.5,
        "used": 0.3,
        "reserved": 0.0,
        "remaining": 0.2,
    }
    listed = world.client("vera").get(URL).json()["results"][0]["money"]
    assert listed == money
    shown = re.search(r'data-testid="money">(.*?)</dd>', _page(world), re.S)
    assert shown is not None
    text = re.sub(r"<[^>]+>", "", shown.group(1))
    assert "0.30 EUR of 0.50 EUR · 0.20 EUR left" in text
    assert "50 EUR per million tokens (prompt ×1, completion ×3)" in text


def test_an_alias_is_priced_by_its_targets_base_model_and_mixed_prices_show_none(
    world, budget, settings, tmp_path
):
    settings.ADAPTER_STORAGE_BACKEND, settings.ADAPTER_STORAGE_ROOT = "local", str(tmp_path)
    other = BaseModel.objects.create(name="other-base", source="x", architecture="LlamaForCausalLM")
    PriceCard.objects.create(base_model=world.base, price_per_million=Decimal("50"))
    PriceCard.objects.create(base_model=other, price_per_million=Decimal("80"))
    Adapter.objects.create(tenant=world.acme, name="elsewhere", base_model=other)
    alias = Alias.objects.create(tenant=world.acme, name="support-bot")
    version = servable_version(world.support, tmp_path, seed=1)
    AliasTarget.objects.create(alias=alias, version=version, weight=100)
    by_alias = Budget.objects.create(
        tenant=world.acme, scope="alias:support-bot", tokens=20_000, window="month"
    )
    assert _detail(world, by_alias)["money"]["limit"] == 1.0  # 20,000 at 50 a million
    # The tenant's requests run on two base models priced differently: no one figure is right.
    assert _detail(world, budget)["money"] is None

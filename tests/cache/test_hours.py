"""Business hours in the demand tracker (workers.cache_policy.hours): a tenant's share follows
its hours the moment they open or close, and hours that say nothing change nothing."""

from __future__ import annotations

import random

import pytest

from workers.cache_policy import DemandTracker
from workers.cache_policy.hours import HoursRates

DAY = 3600.0
OPEN = 1440.0  # the first 40% of each day


def office_hours(group: str, t: float) -> bool | None:
    """Tenant "office" works the first 40% of each day; "shop" has no hours."""
    if group != "office":
        return None
    return t % DAY < OPEN


def two_tenants(days: float, seed: int = 1) -> list[tuple[float, str]]:
    """1 request/s from "shop" (two versions) all day; 2 requests/s from "office" (two
    versions) in its hours only."""
    rng = random.Random(seed)
    out: list[tuple[float, str]] = []
    t = 0.0
    while t < days * DAY:
        t += rng.expovariate(3.0)
        if rng.random() < 1 / 3:
            out.append((t, rng.choice(["shop--a", "shop--b"])))
        elif office_hours("office", t):
            out.append((t, rng.choice(["office--a", "office--b"])))
    return out


def feed(tracker: DemandTracker, history: list[tuple[float, str]], until: float) -> None:
    for t, name in history:
        if t >= until:
            break
        tracker.observe(name, t)


def test_rates_learn_each_state_and_share_out_the_current_ones() -> None:
    rates = HoursRates(office_hours, half_life_s=7 * 86_400, min_exposure_s=100.0)
    checked = False
    for t, name in two_tenants(days=2.0):
        if t >= DAY + 2000.0 and not checked:  # day 2, office closed
            rates.advance(t)
            assert rates.share("shop") == pytest.approx(1.0, abs=0.01)
            assert rates.share("office") == pytest.approx(0.0, abs=0.01)
            checked = True
        if t >= 2 * DAY:
            break
        rates.observe(name.partition("--")[0], t)
    assert rates.advance(2 * DAY + 1.0) == ["office"]  # opens again
    # Open: 2/s against the shop's 1/s.
    assert rates.share("office") == pytest.approx(2 / 3, abs=0.03)
    assert rates.share("shop") == pytest.approx(1 / 3, abs=0.03)


def test_a_tenant_is_hot_the_moment_its_hours_open() -> None:
    history = two_tenants(days=2.0)
    told = DemandTracker(hours=office_hours)
    blind = DemandTracker()
    before_open = 2 * DAY - 1.0  # the end of day 1's closed hours
    feed(told, history, before_open)
    feed(blind, history, before_open)
    assert told.share("office--a") < 0.02 and blind.share("office--a") < 0.02
    told.advance(2 * DAY + 1.0)  # open, not one request yet
    blind.advance(2 * DAY + 1.0)
    assert told.share("office--a") == pytest.approx(1 / 3, abs=0.05)
    assert blind.share("office--a") < 0.02  # the counts alone have not seen it yet
    # The shop's versions keep their ranking inside the shop and make room.
    assert told.share("shop--a") < 0.25


def test_a_tenant_goes_cold_the_moment_its_hours_close() -> None:
    history = two_tenants(days=2.0)
    told = DemandTracker(hours=office_hours)
    blind = DemandTracker()
    feed(told, history, DAY + OPEN - 1.0)  # day 2, the last second of office hours
    feed(blind, history, DAY + OPEN - 1.0)
    told.advance(DAY + OPEN + 1.0)
    assert told.share("office--a") < 0.02
    assert blind.share("office--a") > 0.2
    assert told.share("shop--a") == pytest.approx(0.5, abs=0.08)


def test_hours_that_do_not_shape_the_traffic_change_nothing() -> None:
    """A tenant with hours but the same traffic in and out of them keeps its share."""
    rng = random.Random(3)
    told = DemandTracker(hours=office_hours)
    blind = DemandTracker()
    t = 0.0
    while t < 2.2 * DAY:
        t += rng.expovariate(2.0)
        name = rng.choice(["office--a", "shop--a"])
        told.observe(name, t)
        blind.observe(name, t)
    told.advance(t)
    blind.advance(t)
    assert told.share("office--a") == pytest.approx(blind.share("office--a"), abs=0.05)
    assert told.share("office--a") == pytest.approx(0.5, abs=0.08)


def test_a_new_tenant_with_hours_does_not_look_huge() -> None:
    """Seen for a few seconds, a state's rate counts as over min_exposure_s."""
    rates = HoursRates(office_hours, half_life_s=7 * 86_400, min_exposure_s=100.0)
    for i in range(600):
        rates.observe("shop", i * 1.0)
    for i in range(3):
        rates.observe("office", 600.0 + i)
    rates.advance(603.0)
    assert rates.share("office") is None  # its state seen 3 s: not long enough to say
    rates.advance(720.0)
    share = rates.share("office")
    assert share is not None and share < 0.05  # 3 requests in 120 s against 1/s

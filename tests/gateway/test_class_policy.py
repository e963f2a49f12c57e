"""The service classes' policy on its own (gateway.class_policy, pure): weighted max-min fair
shares, who may take a slot on a saturated engine, which class the next slot goes to, and when
a request is shed (issue 46, part 2)."""

from __future__ import annotations

import pytest

from gateway.class_policy import (
    DEFAULT_PLANS,
    ClassPlan,
    ClassTurns,
    DrainMeter,
    expected_wait_s,
    lower_class_holds,
    may_take,
    plans_by_name,
    retry_after_s,
    room,
    shares,
    should_shed,
)

PLANS = plans_by_name(DEFAULT_PLANS)


def test_every_class_wanting_more_than_its_part_gets_its_weights_share():
    got = shares(20, {"gold": 100, "silver": 100, "bronze": 100}, PLANS)
    assert got == pytest.approx({"gold": 12.0, "silver": 6.0, "bronze": 2.0})


def test_a_class_wanting_less_leaves_the_rest_to_the_others_by_weight():
    got = shares(20, {"gold": 2, "silver": 100, "bronze": 100}, PLANS)
    assert got == pytest.approx({"gold": 2.0, "silver": 13.5, "bronze": 4.5})


def test_an_engine_with_room_takes_any_class():
    assert may_take(8, {"bronze": 7}, "bronze", 1, PLANS)


def test_a_saturated_engine_holds_a_class_at_its_share_and_lets_the_heavier_one_in():
    load = {"bronze": 8}
    assert not may_take(8, load, "bronze", 1, PLANS)  # alone it had all; now it wants more
    assert may_take(8, load, "gold", 1, PLANS)  # gold holds nothing: it goes in


def test_no_class_starves_a_class_holding_nothing_always_gets_one_in():
    load = {"gold": 60, "silver": 30}
    assert may_take(10, load, "bronze", 1, PLANS)
    assert not may_take(10, {**load, "bronze": 1}, "bronze", 1, PLANS)


def test_slots_go_to_waiting_classes_in_proportion_to_their_weights():
    turns = ClassTurns()
    given = {"gold": 0, "silver": 0, "bronze": 0}
    for name in given:
        turns.join(name)
    for _ in range(100):
        chosen = turns.pick(given, PLANS) or ""
        turns.served(chosen, 1, PLANS)
        given[chosen] += 1
    assert given == {"gold": 60, "silver": 30, "bronze": 10}


def test_a_class_that_starts_waiting_saves_no_credit_from_its_idle_time():
    turns = ClassTurns()
    turns.join("gold")
    for _ in range(60):
        turns.served("gold", 1, PLANS)
    turns.join("bronze")  # bronze arrives late: it gets its share from now, not 60 slots
    picks = []
    for _ in range(14):
        chosen = turns.pick(["gold", "bronze"], PLANS) or ""
        turns.served(chosen, 1, PLANS)
        picks.append(chosen)
    assert picks.count("bronze") == 2 and picks[0] == "bronze"
    assert turns.pick([], PLANS) is None


def test_expected_wait_is_the_excess_drained_at_the_class_share():
    # 10 slots, gold holds 6 (less than its 60/7): bronze's share is the 4 left over
    assert expected_wait_s(10, {"gold": 6, "bronze": 3}, "bronze", 1, PLANS, 2.0) == 0.0
    assert expected_wait_s(10, {"gold": 6, "bronze": 4}, "bronze", 1, PLANS, 2.0) == (
        pytest.approx(1 / (2.0 * 4 / 10))
    )
    # gold holds 9 of 10, bronze 1 and wants another: share 10/7, excess 2 - 10/7
    wait = expected_wait_s(10, {"gold": 9, "bronze": 1}, "bronze", 1, PLANS, 10.0)
    assert wait == pytest.approx((2 - 10 / 7) / (10.0 * (10 / 7) / 10))
    assert expected_wait_s(10, {"gold": 9, "bronze": 1}, "bronze", 1, PLANS, 0.0) is None


def test_shed_only_a_sheddable_class_past_its_bound_with_no_lighter_class_holding():
    bronze, gold = PLANS["bronze"], PLANS["gold"]
    assert should_shed(bronze, 3.0, 0.0, lower_holds=False)
    assert not should_shed(bronze, 1.0, 0.0, lower_holds=False)
    assert not should_shed(gold, 60.0, 30.0, lower_holds=False)  # gold: never shed
    loose_gold = ClassPlan("gold", 6, 1.0, True)
    assert not should_shed(loose_gold, 5.0, 0.0, lower_holds=True)
    assert should_shed(loose_gold, 5.0, 0.0, lower_holds=False)
    assert not should_shed(bronze, None, 1.0, lower_holds=False)  # drain not known yet
    assert should_shed(bronze, None, 2.0, lower_holds=False)


def test_a_lower_class_holding_a_slot_is_seen():
    assert lower_class_holds("gold", {"gold": 3, "bronze": 1}, PLANS)
    assert not lower_class_holds("bronze", {"gold": 3, "bronze": 1}, PLANS)
    assert not lower_class_holds("gold", {"gold": 3, "bronze": 0}, PLANS)


def test_retry_after_rounds_the_expected_wait_up():
    assert retry_after_s(2.1) == 3
    assert retry_after_s(0.2) == 1
    assert retry_after_s(None) == 1


def test_the_drain_meter_turns_a_growing_count_into_a_rate():
    meter = DrainMeter()
    assert meter.observe(0, 100.0) == 0.0
    assert meter.observe(20, 102.0) == pytest.approx(10.0)
    assert 10.0 < meter.observe(60, 104.0) < 20.0
    assert meter.observe(0, 105.0) == meter.rate  # the count restarted: no sample


def test_sheddable_classes_leave_the_gold_headroom_free():
    # 8 slots, 2 of them gold's headroom: silver and bronze fill 6 at most...
    assert may_take(8, {"silver": 5}, "silver", 1, PLANS, headroom=2)
    assert not may_take(8, {"silver": 6}, "silver", 1, PLANS, headroom=2)
    assert not may_take(8, {"silver": 6}, "bronze", 1, PLANS, headroom=2)  # even holding none
    assert not may_take(8, {"gold": 2, "silver": 4}, "bronze", 1, PLANS, headroom=2)
    # ...which gold finds free at once, and fills up to the engine's slots.
    assert may_take(8, {"silver": 6}, "gold", 1, PLANS, headroom=2)
    assert may_take(8, {"gold": 1, "silver": 6}, "gold", 1, PLANS, headroom=2)
    assert room(8, "gold", PLANS, 2) == 8 and room(8, "bronze", PLANS, 2) == 6
    assert room(2, "bronze", PLANS, 5) == 1  # a sheddable class always has one slot
    assert room(8, "platinum", PLANS, 2) == 6  # a class with no plan is sheddable
    # A request heavier than the room (n=8) still runs alone on an idle engine.
    assert may_take(8, {}, "silver", 8, PLANS, headroom=2)
    assert not may_take(8, {"silver": 1}, "silver", 8, PLANS, headroom=2)


def test_gold_cannot_starve_the_others_through_the_headroom():
    # Gold alone holds all of the sheddable classes' room (6 of 8): bronze, holding nothing,
    # goes in past the headroom, and silver may take its fair share of the engine back.
    assert may_take(8, {"gold": 7}, "bronze", 1, PLANS, headroom=2)
    assert may_take(8, {"gold": 6, "bronze": 1}, "silver", 1, PLANS, headroom=2)
    # Silver at its share (2.67 of 8 against gold's 6): held; gold at its own: held too.
    assert not may_take(8, {"gold": 6, "silver": 2}, "silver", 1, PLANS, headroom=2)
    assert not may_take(8, {"gold": 6, "silver": 2}, "gold", 1, PLANS, headroom=2)
    # Gold holds all 8 of silver's room on 10 slots: silver takes its share (3.33) back.
    assert may_take(10, {"gold": 8, "silver": 1}, "silver", 1, PLANS, headroom=2)
    # Gold holds less than the room: the headroom stays free, whoever holds nothing.
    assert not may_take(8, {"gold": 5, "silver": 1}, "bronze", 1, PLANS, headroom=2)


def test_a_sheddable_class_expects_its_wait_over_its_room_not_the_whole_engine():
    # 8 slots, headroom 2: bronze's room is 6, its share of it against silver's 6 is 1.5.
    no_headroom = expected_wait_s(8, {"silver": 6, "bronze": 2}, "bronze", 1, PLANS, 4.0)
    with_headroom = expected_wait_s(8, {"silver": 6, "bronze": 2}, "bronze", 1, PLANS, 4.0, 2)
    assert no_headroom is not None and with_headroom is not None
    assert with_headroom > no_headroom
    assert with_headroom == pytest.approx((3 - 1.5) / (4.0 * 1.5 / 8))


def test_a_request_held_by_the_headroom_expects_the_engine_to_drain_below_its_room():
    # Silver holds the 6 slots of its room (headroom 2): bronze is within its share of that
    # room, but waits for the engine to drop below it, 1 slot at 4 a second.
    load = {"silver": 6}
    assert expected_wait_s(8, load, "bronze", 1, PLANS, 4.0) == 0.0
    assert expected_wait_s(8, load, "bronze", 1, PLANS, 4.0, 2) == pytest.approx(1 / 4.0)
    assert expected_wait_s(8, load, "bronze", 1, PLANS, 0.0, 2) is None
    assert expected_wait_s(8, load, "gold", 1, PLANS, 4.0, 2) == 0.0  # the headroom is gold's

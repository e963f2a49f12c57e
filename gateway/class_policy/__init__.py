"""Service classes' policy at the gateway, pure (no Django): the weighted fair shares of a
saturated engine, which class's waiter a free slot goes to, and when a request is shed. The
gateway (gateway.fairness, gateway.limits, the admission script's mirror of `may_take`) and the
benchmark's simulator (bench/classes.py) run this same code."""

from gateway.class_policy.policy import (
    DEFAULT_PLANS,
    ClassPlan,
    ClassTurns,
    DrainMeter,
    engine_priority,
    expected_wait_s,
    lower_class_holds,
    may_take,
    plans_by_name,
    retry_after_s,
    room,
    shares,
    should_shed,
)

__all__ = [
    "DEFAULT_PLANS",
    "ClassPlan",
    "ClassTurns",
    "DrainMeter",
    "engine_priority",
    "expected_wait_s",
    "lower_class_holds",
    "may_take",
    "plans_by_name",
    "retry_after_s",
    "room",
    "shares",
    "should_shed",
]

"""An eval run's asking runs in a thread of its own at a lower CPU priority (EVAL_RUN_NICE), so
that live requests win the cores a worker shares with the gateway and the engines; what the work
raises reaches the task."""

from __future__ import annotations

import os
import threading

import pytest

from evals.services.runner import at_lower_priority


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_the_work_and_the_threads_it_starts_run_at_the_lowered_priority(settings):
    settings.EVAL_RUN_NICE = 7
    before = _own_nice()
    seen: dict[str, int] = {}

    def work() -> None:
        seen["work"] = _own_nice()
        child = threading.Thread(target=lambda: seen.__setitem__("child", _own_nice()))
        child.start()
        child.join()

    at_lower_priority(work)
    assert seen == {"work": min(19, before + 7), "child": min(19, before + 7)}
    assert _own_nice() == before  # the task's own thread keeps its priority


def test_zero_leaves_the_priority_alone(settings):
    settings.EVAL_RUN_NICE = 0
    seen: list[int] = []
    at_lower_priority(lambda: seen.append(_own_nice()))
    assert seen == [_own_nice()]


def test_what_the_work_raises_is_raised_in_the_tasks_thread(settings):
    settings.EVAL_RUN_NICE = 3

    def fails() -> None:
        raise LookupError("no such case")

    with pytest.raises(LookupError, match="no such case"):
        at_lower_priority(fails)

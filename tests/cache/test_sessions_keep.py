"""Conversations in the demand tracker (workers.cache_policy.sessions): a conversation counts
once, its later turns keep its version for a while, and without follow-ups nothing changes."""

from __future__ import annotations

import random

import pytest

from workers.cache_policy import DemandParams, DemandTracker
from workers.cache_policy.sessions import SessionKeep


def chats(seed: int, marked: bool) -> tuple[DemandTracker, float]:
    """40 versions, Zipf first turns; each conversation 1-9 turns, 2-20 s apart, 0.25 new
    conversations a second. `marked`: the tracker is told which turns are later ones."""
    rng = random.Random(seed)
    names = [f"v{i}" for i in range(40)]
    weights = [1 / (i + 1) for i in range(40)]
    turns: list[tuple[float, str, bool]] = []
    t = 0.0
    for _ in range(1500):
        t += rng.expovariate(0.25)
        name = rng.choices(names, weights)[0]
        at = t
        for turn in range(rng.randint(1, 9)):
            turns.append((at, name, turn > 0))
            at += rng.uniform(2.0, 20.0)
    turns.sort()
    d = DemandTracker()
    for at, name, later in turns:
        d.observe(name, at, follow_up=later and marked)
    return d, turns[-1][0]


def test_marked_conversations_keep_the_long_memory_popularity_needs() -> None:
    """Counted per turn, runs of one version make the shortest memory predict best (recency);
    counted per conversation, first turns are independent draws and the longest wins."""
    unmarked, _ = chats(1, marked=False)
    marked, _ = chats(1, marked=True)
    assert unmarked.long_half_life() == min(DemandParams().alt_long_half_lives)
    assert marked.long_half_life() >= DemandParams().long_half_life


def test_a_long_conversation_is_one_unit_of_demand() -> None:
    d = DemandTracker()
    t = 0.0
    for i in range(300):  # many short conversations on "wide", one long one on "chatty"
        d.observe("wide" if i % 3 else "other", t)
        t += 1.0
    for _ in range(200):
        d.observe("chatty", t, follow_up=True)
        t += 1.0
    d.observe("chatty", 0.5)  # its first turn, early on
    t += 1000.0  # long after: no open session
    d.advance(t)
    assert d.share("chatty") < d.share("other") < d.share("wide")


def test_a_version_with_an_open_conversation_is_kept_while_it_may_come_back() -> None:
    keep = SessionKeep()
    for _ in range(100):  # every turn gets a follow-up 5-10 s later, half the time
        keep.observe(False, None)
        keep.observe(True, 5.0)
        keep.observe(True, 10.0)
    assert keep.continued == pytest.approx(2 / 3, abs=0.02)
    assert 10.0 <= keep.window() <= 12.0  # the bin above the longest gap
    rate = 1.0
    assert keep.keep(3.0, keep.window(), rate) == pytest.approx(keep.continued / keep.window())
    assert keep.keep(30.0, keep.window(), rate) == 0.0  # gone quiet: the session is over
    assert keep.keep(None, keep.window(), rate) == 0.0  # never seen


def test_the_tracker_keeps_the_version_of_a_conversation_under_way() -> None:
    d, end = chats(2, marked=True)
    d.observe("v39", end + 1.0)  # the least popular version: a conversation starts
    d.advance(end + 3.0)
    fresh = d.share("v39")
    d.advance(end + 200.0)  # no follow-up came: it is over
    assert fresh > 5 * d.share("v39")
    assert fresh > d.share("v5")  # above versions that are busier but quiet now


def test_without_follow_ups_shares_are_those_of_every_request() -> None:
    rng = random.Random(4)
    plain, told = DemandTracker(), DemandTracker()
    for i in range(2000):
        name = f"v{rng.randrange(10)}"
        plain.observe(name, float(i))
        told.observe(name, float(i), follow_up=False)
    told.advance(2000.0)
    assert told.shares_and_hits([f"v{i}" for i in range(10)]) == plain.shares_and_hits(
        [f"v{i}" for i in range(10)]
    )

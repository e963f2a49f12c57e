"""What business hours say about demand: each tenant's request rate with its hours open and with
them closed, learnt from the requests themselves.

A tenant whose adapters follow `preload_on_business_hours` windows gets its traffic in those
hours. The counts see that only after a few dozen requests (the tracker's z-test), and meanwhile
the versions of a tenant that just closed look as hot as ever and those of one that just opened
look cold. The schedule says when it happens; these rates say how much: a tenant's share the
moment its hours open is its rate with them open over every tenant's rate in its own state.

Nothing is assumed about a schedule: a tenant whose traffic does not follow its hours gets the
same rate in both states, and the share comes out as before. Pure state, like the tracker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

# Whether a demand group's (tenant's) business hours are open at a time (seconds, the clock
# of the requests' times); None for a group that has none.
GroupHours = Callable[[str, float], bool | None]

MAX_STEPS = 1000


@dataclass(slots=True)
class _Exposure:
    """A group's requests and the time it spent in each state, decayed by time: the ratio is
    its request rate in that state lately."""

    state: bool | None
    at: float  # the time `count` and `seconds` were brought up to
    count: dict[bool | None, float] = field(default_factory=dict)
    seconds: dict[bool | None, float] = field(default_factory=dict)


class HoursRates:
    def __init__(
        self, hours: GroupHours, half_life_s: float, min_exposure_s: float, step_s: float = 60.0
    ) -> None:
        self.hours = hours
        self._k = math.log(2) / half_life_s
        self.min_exposure_s = min_exposure_s
        # Every group's hours are looked at least this often (in the requests' time), so the
        # time each spends open and closed is right within a step even when nothing asks.
        self.step_s = step_s
        self._groups: dict[str, _Exposure] = {}
        self._now = -math.inf  # the latest time seen
        self._walked = -math.inf  # the latest time every group was brought up to

    def observe(self, group: str, t: float) -> list[str]:
        """Count one request of `group` at t; the groups whose hours opened or closed since."""
        changed = self.advance(t) if t >= self._walked + self.step_s else []
        self._now = max(self._now, t)
        e = self._groups.get(group)
        if e is None:
            e = self._groups[group] = _Exposure(self.hours(group, t), t)
        elif self._bring_up(e, t, self.hours(group, t)) and group not in changed:
            changed.append(group)
        e.count[e.state] = e.count.get(e.state, 0.0) + 1.0
        return changed

    def advance(self, now: float) -> list[str]:
        """Bring every group up to `now`, looking at its hours every `step_s` (or every
        1/MAX_STEPS of the way, if longer) on the way; the groups whose hours opened or closed."""
        changed: list[str] = []
        t = now if self._walked == -math.inf else self._walked
        # After a long quiet spell the steps grow, so a pass never walks more than MAX_STEPS.
        step = max(self.step_s, (now - t) / MAX_STEPS)
        while True:
            t = min(now, t + step)
            for g, e in self._groups.items():
                if self._bring_up(e, t, self.hours(g, t)) and g not in changed:
                    changed.append(g)
            if t >= now:
                break
        self._walked = max(self._walked, now)
        self._now = max(self._now, now)
        return changed

    def _bring_up(self, e: _Exposure, t: float, state: bool | None) -> bool:
        """Decay the counts to t and add the time since the last update to the state it was in
        (a change is taken to happen at t: the walk looks at least every `step_s`)."""
        if t <= e.at:
            return False  # not behind: an older time says nothing new
        decay = math.exp(-self._k * (t - e.at))
        for s in e.count:
            e.count[s] *= decay
        for s in e.seconds:
            e.seconds[s] *= decay
        e.seconds[e.state] = e.seconds.get(e.state, 0.0) + (1.0 - decay) / self._k
        e.at = t
        changed = state != e.state
        e.state = state
        return changed

    def _in_state(self, e: _Exposure) -> tuple[float, float]:
        """(requests, seconds) of the group in its current state, decayed to now."""
        decay = math.exp(-self._k * max(0.0, self._now - e.at))
        seconds = e.seconds.get(e.state, 0.0) * decay + (1.0 - decay) / self._k
        return e.count.get(e.state, 0.0) * decay, seconds

    def share(self, group: str) -> float | None:
        """The group's share of all requests now: its rate in its state now over every group's
        in theirs. None until its state has been seen for `min_exposure_s`, and for every group
        while no group has business hours (the tracker's own counts decide then)."""
        return self.shares().get(group)

    def shares(self) -> dict[str, float]:
        """share() of every group that has one, in one pass over the groups."""
        if all(e.state is None for e in self._groups.values()):
            return {}
        seen = {g: self._in_state(e) for g, e in self._groups.items()}
        # A state seen only briefly counts as seen for `min_exposure_s`: a new tenant's first
        # requests do not make it look huge.
        rates = {g: n / max(secs, self.min_exposure_s) for g, (n, secs) in seen.items()}
        total = sum(rates.values())
        if total <= 0.0:
            return {}
        return {g: rates[g] / total for g, (_, secs) in seen.items() if secs >= self.min_exposure_s}

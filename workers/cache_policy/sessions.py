"""Conversations: a session's later turns are not new demand, but they will come back soon.

A chat caller sends several turns to one adapter a few seconds apart. Counted as requests, one
long conversation makes its adapter look popular, and the tracker's memory-scale choice sees
that the next request is often the last one's version and picks a short memory: popularity
turns into recency, and every first turn, which is what misses, is predicted badly. The gateway
tells a follow-up turn from a first one (its history continues an earlier request:
gateway/conversations.py), so the tracker counts popularity from first turns only and gives a
version with a turn in the last `window` seconds the chance its session comes back.

Both numbers are learnt, not set: `continued` is the share of turns that got a follow-up (each
follow-up continues exactly one earlier turn), and `window` a high quantile of the gaps between
a follow-up and its version's previous request. With no follow-ups seen, nothing changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Gaps are binned on a log scale from 1/8 s to about 2 days: coarse, and enough for a quantile.
_BIN_BASE = 2.0 ** (1 / 4)
_BIN_FLOOR_S = 0.125
_BINS = 72


@dataclass(frozen=True, slots=True)
class SessionParams:
    half_life: float = 2000.0  # requests: memory of the turn counts and of the gaps
    window_quantile: float = 0.99  # of the follow-up gaps: how long a session may come back


class SessionKeep:
    def __init__(self, params: SessionParams | None = None) -> None:
        self.params = params or SessionParams()
        self._decay = math.exp(-math.log(2) / self.params.half_life)
        self._turns = 0.0  # decayed count of every request
        self._follow_ups = 0.0
        self._gaps = [0.0] * _BINS

    def observe(self, follow_up: bool, gap_s: float | None) -> None:
        """One request; for a follow-up, the seconds since its version's previous request."""
        self._turns = self._turns * self._decay + 1.0
        self._follow_ups *= self._decay
        if not follow_up:
            return
        self._follow_ups += 1.0
        if gap_s is not None:
            self._gaps = [g * self._decay for g in self._gaps]
            self._gaps[_bin(gap_s)] += 1.0

    @property
    def starting(self) -> float:
        """The share of requests that start a session (1.0 with no follow-ups seen)."""
        return 1.0 - self.continued if self._turns > 0 else 1.0

    @property
    def continued(self) -> float:
        """The share of turns that were followed by another turn of their session."""
        return self._follow_ups / self._turns if self._turns > 0 else 0.0

    def window(self) -> float:
        """Seconds after a turn within which its follow-up comes, at `window_quantile`."""
        total = sum(self._gaps)
        if total <= 0:
            return 0.0
        seen = 0.0
        for i, g in enumerate(self._gaps):
            seen += g
            if seen >= self.params.window_quantile * total:
                return _BIN_FLOOR_S * _BIN_BASE ** (i + 1)  # the bin's upper edge
        return _BIN_FLOOR_S * _BIN_BASE**_BINS

    def keep(self, since_last_s: float | None, window_s: float, rate: float) -> float:
        """The share of the next requests a version's open session is expected to send: it
        comes back within the window with probability `continued`, spread over the window."""
        if since_last_s is None or window_s <= 0 or rate <= 0 or since_last_s > window_s:
            return 0.0
        return self.continued / (window_s * rate)


def _bin(gap_s: float) -> int:
    if gap_s <= _BIN_FLOOR_S:
        return 0
    return min(_BINS - 1, int(math.log(gap_s / _BIN_FLOOR_S, _BIN_BASE)))

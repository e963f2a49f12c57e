"""Demand prediction from recent request history: decayed counts at two scales, with a switch.

The clock is the number of requests observed, not seconds, so the prediction (the share of the next
requests that will ask for a version) does not depend on the load level. A version's decayed count
over the decayed count of all requests is its share at that scale. The long scale is the
prediction (steady popularity; one stray request barely moves it) unless the short scale disagrees
with it beyond chance (a Poisson z-test): a version turning hot, or gone cold, after a drift or in
a burst. Rates in requests per second come from the same share times the overall request rate.

Which long scale fits depends on the traffic: independent draws from a steady popularity want a
long memory, sessions and business hours a short one. So the tracker keeps several long scales
(`long_half_lives`), scores each by how well it predicted the requests that came (decayed
log-likelihood of each request's version, before counting it) and predicts with the best one;
no setting is tuned to a trace.

Follow-ups (sessions): a caller often sends another request to the same version a few requests
later, so a version just used is likelier to come next than its share says, for a while. The
tracker learns by how much from the traffic itself: every request closes a gap (requests since the
same version's previous one), and for each gap length bin it keeps the decayed count of gaps that
ended there, the exposure (gaps that reached it) and what the predicted shares expected there. The
excess of observed over expected, per step of exposure, is the follow-up share at that age,
counted only where it is beyond chance (`follow_up_z`); with independent draws it is zero.
Fewer returns than expected (a session over, a zone's working day closed) scale the share down
instead. `follow_ups` gives each version's share so adjusted at its current gap, and
`near_shares` (what the policy keeps by) the higher of it and a short-scale switch. The long
scale adjusted is the best predicting one unless another's shadow cache hits clearly more
(`_keep_scale`). The clock is requests, as above: bursts of arrivals make no follow-ups.
Pure state, fed by whoever sees the requests (the gateway's log, the simulator).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DemandParams:
    short_half_life: float = 50.0  # requests
    long_half_life: float = 1000.0  # requests; the scale used until another predicts better
    # Other long scales the tracker may switch to (see the module docstring); () keeps one scale.
    alt_long_half_lives: tuple[float, ...] = (50.0, 250.0, 4000.0)
    selection_half_life: float = 2000.0  # requests: memory of how well each scale predicted
    switch_z: float = 2.5  # how far (in standard deviations) the short scale must disagree
    rate_half_life_s: float = 300.0  # for the overall request rate, in seconds
    max_tracked: int = 20_000  # versions remembered; the least demanded are forgotten first
    # Follow-ups (see the module docstring); None: not learnt, follow_ups() is always 0
    follow_up_half_life: float | None = 4000.0  # requests: memory of the gap statistics
    follow_up_z: float = 3.0  # how far above the expected the observed returns must be
    follow_up_max_gap: int = 16_384  # requests: longer gaps all fall in the last bin
    keep_slots: int = 32  # the shadow caches' size (an engine's --max-cpu-loras)
    # How many more hits (share) a scale's shadow cache needs over the best predicting scale's
    # to be kept by instead: on independent draws they tie, and the longest memory should win.
    keep_margin: float = 0.003


def _gap_bins(max_gap: int, ratio: float = 1.25) -> list[int]:
    """Lower edges of the gap bins (in requests): 1, 2, ..., then growing by `ratio`."""
    edges = [1]
    while edges[-1] < max_gap:
        edges.append(max(edges[-1] + 1, int(edges[-1] * ratio)))
    return edges


@dataclass(slots=True)
class _Counts:
    n: float  # the request clock at the last update
    short: float
    long: list[float]  # one per long scale


class DemandTracker:
    def __init__(self, params: DemandParams | None = None) -> None:
        self.params = params or DemandParams()
        self._k_short = math.log(2) / self.params.short_half_life
        self._long_half_lives = (self.params.long_half_life, *self.params.alt_long_half_lives)
        self._k_longs = [math.log(2) / h for h in self._long_half_lives]
        self._k_select = math.log(2) / self.params.selection_half_life
        self._score = [0.0] * len(self._k_longs)  # decayed log-likelihood of each long scale
        self._best = 0  # index of the long scale that predicts
        self._k_rate = math.log(2) / self.params.rate_half_life_s
        self._counts: dict[str, _Counts] = {}
        self._n = 0.0  # requests observed
        self._rate_t = 0.0
        self._rate_t0: float | None = None  # first request seen
        self._rate_count = 0.0  # time-decayed count of all requests, for requests per second
        self._last_seen: dict[str, float] = {}
        fu = self.params.follow_up_half_life
        self._fu_edges = _gap_bins(self.params.follow_up_max_gap) if fu else []
        self._fu_growth = math.exp(math.log(2) / fu) if fu else 1.0
        self._fu_weight = 1.0  # the next gap's weight: grows every request (lazy decay)
        bins = len(self._fu_edges)
        self._fu_ended = [0.0] * bins  # gaps that ended in the bin
        self._fu_exposure = [0.0] * bins  # steps of gaps that reached the bin
        # Per long scale: its predicted share summed over those steps
        self._fu_expected = [[0.0] * bins for _ in self._k_longs]
        self._fu_excess: list[float] | None = None  # None: _fu_adjust is stale
        self._fu_adjust: list[tuple[float, float]] = []  # the keep scale's, per bin
        # Per long scale, a cache of `keep_slots` versions run on its shares with follow-ups
        # (evicting the least), and its decayed hits: the scale whose cache hits most is the
        # one the policy keeps by.
        self._shadow: list[set[str]] = [set() for _ in self._k_longs]
        self._shadow_hits = [0.0] * len(self._k_longs)
        self._keep = 0  # the scale the policy keeps by (see _keep_scale)

    @classmethod
    def from_history(
        cls, history: Iterable[tuple[float, str]], params: DemandParams | None = None
    ) -> DemandTracker:
        """Build from (time, version) pairs in time order, e.g. the gateway's recent request log."""
        tracker = cls(params)
        for t, version in history:
            tracker.observe(version, t)
        return tracker

    def observe(self, version: str, t: float) -> None:
        # Scored and binned against what the tracker knew before this request
        if len(self._k_longs) > 1 and self._n > 0:
            self._score_scales(version)
        if self._fu_edges:
            if self._n > 0:
                self._run_shadows(version)
            self._count_gap(version)
        self._n += 1.0
        if self._rate_t0 is None:
            self._rate_t0 = self._rate_t = t
        dt = max(0.0, t - self._rate_t)
        self._rate_count = self._rate_count * math.exp(-self._k_rate * dt) + 1.0
        self._rate_t = max(self._rate_t, t)
        self._last_seen[version] = t
        c = self._counts.get(version)
        if c is None:
            if len(self._counts) >= self.params.max_tracked:
                self._forget_least_demanded()
            self._counts[version] = _Counts(self._n, 1.0, [1.0] * len(self._k_longs))
            return
        dn = self._n - c.n
        c.short = c.short * math.exp(-self._k_short * dn) + 1.0
        c.long = [x * math.exp(-k * dn) + 1.0 for x, k in zip(c.long, self._k_longs, strict=True)]
        c.n = self._n

    def _long_shares(self, c: _Counts) -> list[float]:
        """A tracked version's share at each long scale, at the current clock (no switch)."""
        n = self._n
        return [
            x * math.exp(-k * (n - c.n)) / (-math.expm1(-k * n) / -math.expm1(-k))
            for x, k in zip(c.long, self._k_longs, strict=True)
        ]

    def _gap(self, c: _Counts) -> int:
        """The gap the version's next request would close (1: the very next request)."""
        return int(round(self._n + 1.0 - c.n))

    def _bin(self, gap: int) -> int:
        return bisect.bisect_right(self._fu_edges, gap) - 1

    def _count_gap(self, version: str) -> None:
        """Bin the gap this request closes, against what each long scale predicted for it."""
        self._fu_excess = None
        self._fu_weight *= self._fu_growth
        if self._fu_weight > 1e100:  # rescale the lazily decayed sums
            for sums in (self._fu_ended, self._fu_exposure, *self._fu_expected):
                for b in range(len(sums)):
                    sums[b] /= self._fu_weight
            self._fu_weight = 1.0
        c = self._counts.get(version)
        if c is None:
            return
        gap = self._gap(c)
        shares = self._long_shares(c)
        w = self._fu_weight
        edges = self._fu_edges
        last = len(edges) - 1
        for b, lo in enumerate(edges):
            if lo > gap:
                break
            hi = edges[b + 1] if b < last else gap + 1
            steps = w * (min(gap, hi - 1) - lo + 1)
            self._fu_exposure[b] += steps
            for expected, share in zip(self._fu_expected, shares, strict=True):
                expected[b] += steps * share
            if gap < hi:
                self._fu_ended[b] += w
                break

    def _adjust(self, j: int, b: int) -> tuple[float, float]:
        """(factor, addend) for long scale j's share in gap bin b, learnt: (1, 0) within chance.

        More returns than predicted (a session's next turns) add a share on top, alike for
        every version; fewer (a session over, a zone's business hours closed) scale the share
        down by what came over what was predicted.
        """
        exposure = self._fu_exposure[b]
        if exposure <= 0.0:
            return 1.0, 0.0
        w = self._fu_weight
        ended, expected = self._fu_ended[b] / w, self._fu_expected[j][b] / w
        if abs(ended - expected) <= self.params.follow_up_z * math.sqrt(expected + 1.0):
            return 1.0, 0.0
        if ended > expected:
            return 1.0, (ended - expected) / (exposure / w)
        return (ended + 1.0) / (expected + 1.0), 0.0

    def follow_ups(self, versions: Iterable[str]) -> dict[str, float]:
        """Each version's share of the next request learnt from how many requests ago it was
        last asked for: its long-scale share adjusted by the returns seen at that gap (see the
        module docstring). Equal to the long-scale share where nothing was learnt."""
        names = list(versions)
        if self._n == 0:
            return {v: 0.0 for v in names}
        j = self._keep_scale()
        mass = self._clock_mass(self._k_longs[j])
        if self._fu_edges:
            self._fu_adjust = [self._adjust(j, b) for b in range(len(self._fu_edges))]
        out: dict[str, float] = {}
        for version in names:
            c = self._counts.get(version)
            long = (c.long[j] * math.exp(-self._k_longs[j] * (self._n - c.n)) if c else 0.0) / mass
            if c is None or not self._fu_edges:
                out[version] = long
                continue
            factor, add = self._fu_adjust[self._bin(self._gap(c))]
            out[version] = long * factor + add
        return out

    def near_shares(self, versions: Iterable[str]) -> dict[str, float]:
        """Predicted share of the next requests with follow-ups (`follow_ups`), or `share` where
        that is higher (a burst, a drift the short scale caught)."""
        names = list(versions)
        shares = self.shares_and_hits(names)
        if not self._fu_edges:
            return {v: shares[v][0] for v in names}
        follow = self.follow_ups(names)
        switched = self._switched(names, shares)
        return {v: max(switched.get(v, 0.0), follow[v]) for v in names}

    def _adjusted(self, version: str, j: int) -> float:
        """Long scale j's share of a version with the follow-ups learnt against it."""
        c = self._counts.get(version)
        if c is None:
            return 0.0
        k = self._k_longs[j]
        share = c.long[j] * math.exp(-k * (self._n - c.n)) / self._clock_mass(k)
        factor, add = self._adjust(j, self._bin(self._gap(c)))
        return share * factor + add

    def _run_shadows(self, version: str) -> None:
        """One request through each long scale's shadow cache (see `_keep_scale`)."""
        decay = math.exp(-self._k_select)
        slots = self.params.keep_slots
        for j, cache in enumerate(self._shadow):
            self._shadow_hits[j] *= decay
            if version in cache:
                self._shadow_hits[j] += 1.0
                continue
            if len(cache) >= slots:
                cache.discard(min(cache, key=lambda v: (self._adjusted(v, j), v)))
            cache.add(version)
        # The best predicting scale unless another's cache clearly hits more
        best = max(range(len(self._shadow)), key=self._shadow_hits.__getitem__)
        margin = self.params.keep_margin
        if self._shadow_hits[best] > (1.0 + margin) * self._shadow_hits[self._best]:
            self._keep = best
        else:
            self._keep = self._best

    def _keep_scale(self) -> int:
        """The long scale `follow_ups` adjusts: the best predicting one (`_best`), unless
        another's shadow cache hits clearly more (`keep_margin`).

        Not the best predicting one (`_best`): log-likelihood rewards a short memory on session
        traffic (it tracks which popular versions have sessions on), while what a cache needs is
        the order of the versions nobody asked for lately, which only a long memory knows; on
        business hours the short memory wins both. So each scale runs a cache of `keep_slots`
        on its own shares with follow-ups, and the one that would have hit most is used."""
        if not self._fu_edges:
            return self._best
        return self._keep

    def _switched(
        self, names: list[str], shares: dict[str, tuple[float, float]]
    ) -> dict[str, float]:
        """The versions whose short scale disagrees with the long one beyond chance (a burst,
        a drift): their short-scale share."""
        long_mass = self._clock_mass(self._k_longs[self._best])
        out: dict[str, float] = {}
        for v in names:
            long = self._decayed(v)[1] / long_mass if self._n else 0.0
            if shares[v][0] != long:
                out[v] = shares[v][0]
        return out

    def _score_scales(self, version: str) -> None:
        """Add log(predicted share) of the version just requested to each long scale's score.

        Shares are counted before this request and smoothed, so a version never seen costs every
        scale alike. Follow-ups stay out of it: adjusted by gap, even a short memory's shares
        fit independent draws well, and `share` would lose its long memory there.
        """
        n = self._n
        c = self._counts.get(version)
        floor = 0.5 / (len(self._counts) + 1)
        decay = math.exp(-self._k_select)
        for j, k in enumerate(self._k_longs):
            mass = -math.expm1(-k * n) / -math.expm1(-k)
            count = c.long[j] * math.exp(-k * (n - c.n)) if c is not None else 0.0
            self._score[j] = self._score[j] * decay + math.log((count + floor) / (mass + 0.5))
        best = max(range(len(self._score)), key=self._score.__getitem__)
        if self._score[best] > self._score[self._best]:
            self._best = best

    def _decayed(self, version: str) -> tuple[float, float]:
        c = self._counts.get(version)
        if c is None:
            return 0.0, 0.0
        dn = self._n - c.n
        j = self._best
        return c.short * math.exp(-self._k_short * dn), c.long[j] * math.exp(-self._k_longs[j] * dn)

    def versions(self) -> list[str]:
        """The versions it tracks (the most requested recently, up to params.max_tracked)."""
        return list(self._counts)

    def share(self, version: str) -> float:
        """Predicted share of the next requests that will ask for this version."""
        return self.share_and_hits(version)[0]

    def share_and_hits(self, version: str) -> tuple[float, float]:
        """(predicted share, recent decayed hits) in one look-up."""
        return self.shares_and_hits([version])[version]

    def shares_and_hits(self, versions: Iterable[str]) -> dict[str, tuple[float, float]]:
        """share_and_hits for many versions at once (the clock's masses computed once)."""
        if self._n == 0:
            return {v: (0.0, 0.0) for v in versions}
        long_mass = self._clock_mass(self._k_longs[self._best])
        short_mass = self._clock_mass(self._k_short)
        z = self.params.switch_z
        out: dict[str, tuple[float, float]] = {}
        for version in versions:
            short, long = self._decayed(version)
            share = long / long_mass
            expected_short = share * short_mass
            if abs(short - expected_short) > z * math.sqrt(expected_short + 1.0):
                share = short / short_mass
            out[version] = (share, short)
        return out

    def _clock_mass(self, k: float) -> float:
        """The decayed count of all requests so far: sum of exp(-k * age) over ages 0..n-1."""
        return -math.expm1(-k * self._n) / -math.expm1(-k)

    def total_rate(self, now: float) -> float:
        """Requests per second over all versions, lately."""
        if self._rate_t0 is None:
            return 0.0
        dt = max(0.0, now - self._rate_t)
        # Divided by the decayed length of the time observed, not of all time: no warm-up bias.
        span_mass = -math.expm1(-self._k_rate * max(now - self._rate_t0, 1.0)) / self._k_rate
        return self._rate_count * math.exp(-self._k_rate * dt) / span_mass

    def rate(self, version: str, now: float) -> float:
        """Predicted requests per second for this version."""
        return self.share(version) * self.total_rate(now)

    def long_half_life(self) -> float:
        """The long scale predicting now (requests)."""
        return self._long_half_lives[self._best]

    def last_seen(self, version: str) -> float | None:
        return self._last_seen.get(version)

    def _forget_least_demanded(self) -> None:
        drop = sorted(self._counts, key=lambda v: self._decayed(v)[1])
        for version in drop[: max(1, len(drop) // 10)]:
            del self._counts[version]
            self._last_seen.pop(version, None)

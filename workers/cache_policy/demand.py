"""Demand prediction from recent request history: decayed counts at two scales, with a switch.

The clock is the number of requests observed, not seconds, so the prediction (the share of the next
requests that will ask for a version) does not depend on the load level. A version's decayed count
over the decayed count of all requests is its share at that scale. The long scale is the
prediction (steady popularity; one stray request barely moves it) unless the short scale disagrees
with it beyond chance (a Poisson z-test): a version turning hot, or gone cold, after a drift or in
a burst. Rates in requests per second come from the same share times the overall request rate.

Which long scale fits depends on the traffic: independent draws from a steady popularity want a
long memory, sessions a short one. So the tracker keeps several long scales
(`long_half_lives`), scores each by how well it predicted the requests that came (decayed
log-likelihood of each request's version within its tenant, before counting it) and predicts with
the best one; no setting is tuned to a trace. Pure state, fed by whoever sees the requests (the
gateway's log, the simulator).

Tenants come and go together (business hours in a time zone, a batch job): a tenant's versions
fall quiet at once, each too rarely asked for to tell by its own counts. So the tracker also
counts per tenant (`demand_group`), and a version's share is its tenant's share times its share
within the tenant. The tenant's share switches to its short scale when that disagrees beyond
chance (the same z-test, on counts large enough to see a tenant close or open within a few dozen
requests); the long scales are scored on how well they predict a version within its tenant, so
the tenant's own comings and goings no longer make a short memory look best, and the ranking
inside a tenant keeps a long one. With one tenant, or tenants that keep their shares, this is the
plain per-version share.

Where tenants have business hours (`hours`, from their `preload_on_business_hours` windows), a
tenant's share is its learnt rate in its current state over every tenant's (cache_policy.hours),
and the moment its hours open or close its short count is set to what that share predicts, so
the z-test does not take the old state's counts for a change.

Conversations (cache_policy.sessions): a request marked as a follow-up turn is not counted as
demand; the shares are of first turns, scaled by the share of requests that start a session,
plus, for a version with a turn lately, the chance its session comes back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from workers.cache_policy.hours import GroupHours, HoursRates
from workers.cache_policy.sessions import SessionKeep


def demand_group(version: str) -> str:
    """The tenant of a served name (tenant--adapter--vN-digest: adapters.services.uploads
    served_name_for; a tenant's slug never holds "--"); names without one share one group."""
    tenant, sep, _ = version.partition("--")
    return tenant if sep else ""


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
    # Business hours (when the tracker is given them): the memory of each tenant's rate with
    # its hours open and closed, and how long a state must have been seen before its rate counts.
    hours_half_life_s: float = 7 * 86_400.0
    hours_min_exposure_s: float = 100.0


@dataclass(slots=True)
class _Counts:
    n: float  # the request clock at the last update
    short: float
    long: list[float]  # one per long scale


class DemandTracker:
    def __init__(self, params: DemandParams | None = None, hours: GroupHours | None = None) -> None:
        self.params = params or DemandParams()
        self._k_short = math.log(2) / self.params.short_half_life
        self._long_half_lives = (self.params.long_half_life, *self.params.alt_long_half_lives)
        self._k_longs = [math.log(2) / h for h in self._long_half_lives]
        self._k_select = math.log(2) / self.params.selection_half_life
        self._score = [0.0] * len(self._k_longs)  # decayed log-likelihood of each long scale
        self._best = 0  # index of the long scale that predicts
        self._k_rate = math.log(2) / self.params.rate_half_life_s
        self._counts: dict[str, _Counts] = {}
        self._groups: dict[str, _Counts] = {}  # the same counts per tenant (demand_group)
        self._n = 0.0  # requests observed
        self._rate_t = 0.0
        self._rate_t0: float | None = None  # first request seen
        self._rate_count = 0.0  # time-decayed count of all requests, for requests per second
        self._last_seen: dict[str, float] = {}
        self._sessions = SessionKeep()
        self._now = -math.inf  # the latest time seen (a request's, or `advance`'s)
        self._hours: HoursRates | None = None
        if hours is not None:
            self.set_hours(hours)

    def set_hours(self, hours: GroupHours) -> None:
        """Tell the tracker each tenant's business hours (they may change: an operator edits a
        window); what it learnt about the tenants' rates stays."""
        if self._hours is None:
            p = self.params
            self._hours = HoursRates(hours, p.hours_half_life_s, p.hours_min_exposure_s)
        self._hours.hours = hours

    def advance(self, now: float) -> None:
        """Bring the tenants' business hours up to `now` (before planning: a tenant may have
        opened or closed since its last request; an open session's chance of coming back fades)."""
        self._now = max(self._now, now)
        if self._hours is not None and self._hours.advance(now):
            self._expect_shares()

    def _expect_shares(self) -> None:
        """A tenant's hours just opened or closed, so every tenant's share moved: each tenant's
        short count, and its versions', becomes what its share now predicts. The z-tests then
        compare the new state with the new state rather than take the old one's counts for a
        change."""
        assert self._hours is not None
        shares = self._hours.shares()
        for group, share in shares.items():
            g = self._groups.get(group)
            if g is not None:
                self._expect(g, share)
        for version, c in self._counts.items():
            group = demand_group(version)
            g = self._groups.get(group)
            if group in shares and g is not None and g.long[self._best] > 0:
                within = self._aged(c)[self._best] / g.long[self._best]
                self._expect(c, shares[group] * within)

    def _aged(self, c: _Counts) -> list[float]:
        """The long counts of `c`, decayed to the clock now."""
        dn = self._n - c.n
        return [x * math.exp(-k * dn) for x, k in zip(c.long, self._k_longs, strict=True)]

    def _expect(self, c: _Counts, share: float) -> None:
        c.long = self._aged(c)
        c.short = share * self._clock_mass(self._k_short)
        c.n = self._n

    @classmethod
    def from_history(
        cls,
        history: Iterable[tuple[float, str]] | Iterable[tuple[float, str, bool]],
        params: DemandParams | None = None,
        hours: GroupHours | None = None,
    ) -> DemandTracker:
        """Build from (time, version[, follow-up]) in time order, e.g. the gateway's recent
        request log."""
        tracker = cls(params, hours)
        for t, version, *follow_up in history:
            tracker.observe(version, t, follow_up=bool(follow_up and follow_up[0]))
        return tracker

    def observe(self, version: str, t: float, *, follow_up: bool = False) -> None:
        """One request at t; `follow_up`: a later turn of a conversation (not new demand)."""
        if self._rate_t0 is None:
            self._rate_t0 = self._rate_t = t
        dt = max(0.0, t - self._rate_t)
        self._rate_count = self._rate_count * math.exp(-self._k_rate * dt) + 1.0
        self._rate_t = max(self._rate_t, t)
        self._now = max(self._now, t)
        last = self._last_seen.get(version)
        self._sessions.observe(follow_up, t - last if last is not None else None)
        self._last_seen[version] = t
        if follow_up:
            return
        self._n += 1.0
        group = demand_group(version)
        if self._hours is not None and self._hours.observe(group, t):
            self._expect_shares()
        if len(self._k_longs) > 1 and self._n > 1:
            self._score_scales(version, group)
        if version not in self._counts and len(self._counts) >= self.params.max_tracked:
            self._forget_least_demanded()
        self._count(self._counts, version)
        self._count(self._groups, group)

    def _count(self, counts: dict[str, _Counts], key: str) -> None:
        c = counts.get(key)
        if c is None:
            counts[key] = _Counts(self._n, 1.0, [1.0] * len(self._k_longs))
            return
        c.short = c.short * math.exp(-self._k_short * (self._n - c.n)) + 1.0
        c.long = [x + 1.0 for x in self._aged(c)]
        c.n = self._n

    def _score_scales(self, version: str, group: str) -> None:
        """Add log(predicted share within its tenant) of the version just requested to each
        long scale's score.

        Shares are counted before this request (the clock already moved on by one: ages are
        taken at n - 1) and smoothed, so a version never seen costs every scale alike.
        """
        n = self._n - 1.0
        c = self._counts.get(version)
        g = self._groups.get(group)
        floor = 0.5 / (len(self._counts) + 1)
        decay = math.exp(-self._k_select)
        for j, k in enumerate(self._k_longs):
            count = c.long[j] * math.exp(-k * (n - c.n)) if c is not None else 0.0
            in_group = g.long[j] * math.exp(-k * (n - g.n)) if g is not None else 0.0
            self._score[j] = self._score[j] * decay + math.log((count + floor) / (in_group + 0.5))
        best = max(range(len(self._score)), key=self._score.__getitem__)
        if self._score[best] > self._score[self._best]:
            self._best = best

    def _decayed(
        self, version: str, counts: dict[str, _Counts] | None = None
    ) -> tuple[float, float]:
        """(short, long at the predicting scale) decayed counts of a version (or of a tenant,
        from `counts`)."""
        c = (self._counts if counts is None else counts).get(version)
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
        groups: dict[str, tuple[float, float]] = {}  # tenant -> (share, long count)
        by_hours = self._hours.shares() if self._hours is not None else {}
        out: dict[str, tuple[float, float]] = {}
        for version in versions:
            group = demand_group(version)
            if group not in groups:
                g_short, g_long = self._decayed(group, self._groups)
                expected = by_hours[group] * long_mass if group in by_hours else g_long
                groups[group] = (self._switch(g_short, expected, short_mass, long_mass), g_long)
            g_share, g_long = groups[group]
            short, long = self._decayed(version)
            within = long / g_long if g_long > 0 else 0.0
            out[version] = (
                self._switch(short, g_share * within * long_mass, short_mass, long_mass),
                short,
            )
        if self._sessions.continued > 0:
            self._add_open_sessions(out)
        return out

    def _add_open_sessions(self, out: dict[str, tuple[float, float]]) -> None:
        """Shares of first turns, times the share of requests that start a session, plus each
        version's open session (cache_policy.sessions)."""
        starting = self._sessions.starting
        window = self._sessions.window()
        rate = self.total_rate(self._now)
        for version, (share, hits) in out.items():
            last = self._last_seen.get(version)
            since = self._now - last if last is not None else None
            out[version] = (starting * share + self._sessions.keep(since, window, rate), hits)

    def _switch(self, short: float, long: float, short_mass: float, long_mass: float) -> float:
        """The long scale's share, or the short one's where they disagree beyond chance."""
        share = long / long_mass
        expected_short = share * short_mass
        if abs(short - expected_short) > self.params.switch_z * math.sqrt(expected_short + 1.0):
            return short / short_mass
        return share

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
        # Their tenants keep the counts (a tenant's share is of all its requests): the least
        # demanded tenth weighs little inside any tenant, and it decays away like the rest.
        drop = sorted(self._counts, key=lambda v: self._decayed(v)[1])
        for version in drop[: max(1, len(drop) // 10)]:
            del self._counts[version]
            self._last_seen.pop(version, None)

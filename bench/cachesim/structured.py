"""Traces with structure that independent draws lack: sessions, business hours, a launch.

Each generator is seeded and returns the requests in time order plus the schedule an operator
would have set for that traffic (`Windows`: version -> the intervals its keep-warm wish is on),
so the scheduled policy reads configuration, never the trace.

- sessions: a caller opens a session on one adapter (Zipf over adapters) and sends several turns
  (1 + geometric, mean `turns_mean`) a few seconds apart (uniform think time).
- business hours: tenants in `zones` time zones; each zone's adapters get traffic only inside its
  working day (a share `open_fraction` of the simulated day, zones evenly spaced around it), Zipf
  within the zone; a few adapters serve around the clock. The schedule is each zone's window.
- launch: stationary Zipf traffic; at `launch_at` a new adapter is released and its share ramps
  from zero to `launch_share` over `ramp_s`. The schedule is its keep-warm wish from the release.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench.cachesim.trace import BYTES_PER_RANK, TraceRequest

Windows = dict[str, list[tuple[float, float]]]  # version -> [(start, end)], seconds of trace time


@dataclass(frozen=True)
class Common:
    adapters: int = 64
    requests: int = 10_000
    rank: int = 16
    zipf_s: float = 1.0
    prompt_tokens: tuple[int, int] = (64, 1024)
    output_tokens: tuple[int, int] = (16, 256)
    seed: int = 0


def _zipf(rng: np.random.Generator, k: int, s: float, n: int) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1) ** s
    return rng.choice(k, size=n, p=w / w.sum())


def _requests(
    c: Common,
    rng: np.random.Generator,
    times: np.ndarray,
    names: list[str],
    follow_ups: list[bool] | None = None,
) -> list[TraceRequest]:
    order = np.argsort(times, kind="stable")
    prompts = rng.integers(c.prompt_tokens[0], c.prompt_tokens[1] + 1, len(times))
    outputs = rng.integers(c.output_tokens[0], c.output_tokens[1] + 1, len(times))
    out = []
    for j, i in enumerate(order):
        name = names[i]
        tenant = name.split("--")[0]
        out.append(
            TraceRequest(
                t=round(float(times[i]), 6),
                adapter=name,
                tenant=tenant,
                slo="".join(ch for ch in tenant if ch.isalpha()),
                rank=c.rank,
                size_bytes=c.rank * BYTES_PER_RANK,
                prompt_tokens=int(prompts[j]),
                output_tokens=int(outputs[j]),
                follow_up=bool(follow_ups[i]) if follow_ups is not None else False,
            )
        )
    return out


@dataclass(frozen=True)
class SessionSpec:
    common: Common = Common()
    rate: float = 1.0  # requests per second, all sessions together
    turns_mean: float = 4.0
    think_s: tuple[float, float] = (2.0, 20.0)


@dataclass(frozen=True)
class SessionTurn:
    t: float
    adapter: int  # the adapter's number in its name (bronze0--aNNN)
    first: bool
    session: int


def session_turns(
    spec: SessionSpec, rng: np.random.Generator
) -> tuple[list[SessionTurn], np.ndarray]:
    """The trace's requests as turns of their sessions, in time order, and `by_rank` (the
    adapter of each popularity rank)."""
    c = spec.common
    by_rank = rng.permutation(c.adapters)
    session_rate = spec.rate / spec.turns_mean
    out: list[SessionTurn] = []
    t, session = 0.0, 0
    while len(out) < c.requests:
        t += float(rng.exponential(1.0 / session_rate))
        adapter = int(by_rank[_zipf(rng, c.adapters, c.zipf_s, 1)[0]])
        turns = int(rng.geometric(1.0 / max(1.0, spec.turns_mean)))  # 1, 2, ...: mean turns_mean
        at = t
        for turn in range(turns):
            out.append(SessionTurn(at, adapter, turn == 0, session))
            at += float(rng.uniform(*spec.think_s))
        session += 1
    out.sort(key=lambda e: e.t)  # stable: turns at the same instant keep their order
    return out[: c.requests], by_rank


def _session_events(
    spec: SessionSpec, rng: np.random.Generator
) -> tuple[np.ndarray, list[str], list[bool]]:
    """Times, adapters and first-turn flags of the trace's requests, in time order."""
    turns, _ = session_turns(spec, rng)
    return (
        np.array([e.t for e in turns]),
        [f"bronze0--a{e.adapter:03d}" for e in turns],
        [e.first for e in turns],
    )


def sessions(spec: SessionSpec) -> tuple[list[TraceRequest], Windows]:
    rng = np.random.default_rng(spec.common.seed)
    times, names, firsts = _session_events(spec, rng)
    return _requests(spec.common, rng, times, names, [not f for f in firsts]), {}


def session_starts(spec: SessionSpec) -> int:
    """How many of the trace's requests open a session: independent Zipf draws, each of them."""
    return sum(_session_events(spec, np.random.default_rng(spec.common.seed))[2])


@dataclass(frozen=True)
class BusinessHoursSpec:
    common: Common = Common(adapters=96)
    zones: int = 3
    day_s: float = 3600.0  # one simulated day (shortened so a run spans several days)
    open_fraction: float = 0.4  # of the day: zones overlap when zones * open_fraction > 1
    always_on: int = 8  # adapters with traffic around the clock
    always_on_share: float = 0.2  # of all requests
    rate: float = 1.0
    scheduled: int = 8  # per zone: its most requested adapters carry a business-hours schedule


def business_windows(
    spec: BusinessHoursSpec, zone: int, horizon: float
) -> list[tuple[float, float]]:
    start = zone * spec.day_s / spec.zones
    length = spec.open_fraction * spec.day_s
    out = []
    day = -1
    while (day * spec.day_s) < horizon:
        a = day * spec.day_s + start
        out.append((max(0.0, a), a + length))
        day += 1
    return [(a, b) for a, b in out if b > 0]


def _open_zones(spec: BusinessHoursSpec, t: float) -> list[int]:
    phase = t % spec.day_s
    out = []
    for z in range(spec.zones):
        start = z * spec.day_s / spec.zones
        if (phase - start) % spec.day_s < spec.open_fraction * spec.day_s:
            out.append(z)
    return out


def _business_pools(
    spec: BusinessHoursSpec, rng: np.random.Generator
) -> tuple[list[list[str]], list[str], float, float]:
    """Each zone's adapters in popularity order, the always-on ones, and their rates."""
    c = spec.common
    per_zone = (c.adapters - spec.always_on) // spec.zones
    zone_names = [
        [f"bronze{z}--a{z * per_zone + i:03d}" for i in rng.permutation(per_zone)]
        for z in range(spec.zones)
    ]
    always = [
        f"bronze{spec.zones}--a{spec.zones * per_zone + i:03d}" for i in range(spec.always_on)
    ]
    # Each open zone gets the same working-hours rate, so the total rises where zones overlap.
    zone_rate = spec.rate * (1 - spec.always_on_share) / (spec.zones * spec.open_fraction)
    always_rate = spec.rate * spec.always_on_share
    return zone_names, always, zone_rate, always_rate


def business_shares(spec: BusinessHoursSpec, t: float) -> np.ndarray:
    """The popularity the generator draws from at time t (its shares, largest first)."""
    zone_names, always, zone_rate, always_rate = _business_pools(
        spec, np.random.default_rng(spec.common.seed)
    )

    def zipf(k: int) -> np.ndarray:
        w = 1.0 / np.arange(1, k + 1) ** spec.common.zipf_s
        return w / w.sum()

    rates = [always_rate * zipf(len(always))]
    rates += [zone_rate * zipf(len(zone_names[z])) for z in _open_zones(spec, t)]
    shares = np.concatenate(rates)
    return np.sort(shares / shares.sum())[::-1]


def business_hours(spec: BusinessHoursSpec) -> tuple[list[TraceRequest], Windows]:
    c = spec.common
    rng = np.random.default_rng(c.seed)
    zone_names, always, zone_rate, always_rate = _business_pools(spec, rng)
    times: list[float] = []
    names: list[str] = []
    t = 0.0
    peak = always_rate + zone_rate * spec.zones
    while len(times) < c.requests:
        t += float(rng.exponential(1.0 / peak))
        u = float(rng.random()) * peak
        if u < always_rate:
            pool = always
        else:
            z = int((u - always_rate) // zone_rate)
            if z not in _open_zones(spec, t):
                continue  # thinning: this zone is closed now
            pool = zone_names[z]
        times.append(t)
        names.append(pool[int(_zipf(rng, len(pool), c.zipf_s, 1)[0])])
    horizon = times[-1] + spec.day_s
    windows: Windows = {}
    for z, zone in enumerate(zone_names):
        for name in zone[: spec.scheduled]:  # zone lists are in popularity order
            windows[name] = business_windows(spec, z, horizon)
    return _requests(c, rng, np.array(times), names), windows


@dataclass(frozen=True)
class LaunchSpec:
    common: Common = Common()
    rate: float = 1.0
    launch_fraction: float = 0.3  # of the trace's requests before the launch
    launch_share: float = 0.15  # of all requests once ramped up
    ramp_s: float = 300.0


def launch(spec: LaunchSpec) -> tuple[list[TraceRequest], Windows]:
    c = spec.common
    rng = np.random.default_rng(c.seed)
    by_rank = rng.permutation(c.adapters)
    times = np.cumsum(rng.exponential(1.0 / spec.rate, c.requests))
    launch_at = float(times[int(spec.launch_fraction * c.requests)])
    new = f"bronze1--a{c.adapters:03d}"
    draws = _zipf(rng, c.adapters, c.zipf_s, c.requests)
    names = []
    for t, d in zip(times, draws, strict=True):
        share = spec.launch_share * min(1.0, max(0.0, (t - launch_at) / spec.ramp_s))
        if t >= launch_at and rng.random() < share:
            names.append(new)
        else:
            names.append(f"bronze0--a{int(by_rank[d]):03d}")
    return _requests(c, rng, times, names), {new: [(launch_at, math.inf)]}

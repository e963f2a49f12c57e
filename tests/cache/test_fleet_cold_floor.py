"""Cache goal 5: the p99 floor no engine choice beats when a share of the requests must wait
for a load (bench/cachesim/references.py)."""

from __future__ import annotations

import pytest

from bench.cachesim.references import cold_percentile_chance, cold_percentile_floor


def test_the_cold_floor_is_where_the_expected_cold_requests_reach_the_percentile_rank() -> None:
    # ten requests whose cold floors are 0..9 ms; half of them must be cold
    at_least = [max(0, 10 - x) for x in range(20)]
    # nearest-rank p90 of 10 looks at the 2 largest: 0.5 x (10 - x) >= 2 up to x = 6
    x, expected, sd = cold_percentile_floor(at_least, 0.5, 10, p=90.0)
    assert (x, expected) == (6, 2.0)
    assert sd == pytest.approx((4 * 0.25) ** 0.5)
    assert cold_percentile_chance(at_least, 0.5, 10, 6, p=90.0) < 0.5
    assert cold_percentile_chance(at_least, 0.5, 10, 9, p=90.0) > 0.5
    assert cold_percentile_floor(at_least, 0.0, 10, p=90.0) == (0, 0.0, 0.0)

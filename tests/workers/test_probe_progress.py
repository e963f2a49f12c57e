"""The prober's progress rule (workers.services.engines): an engine is stuck only when a one-token request
did not finish and its token counters did not move meanwhile (a finished one is never judged).
The real stalled engine: tests/faults/test_engine_stalled.py."""

from __future__ import annotations

import pytest

from workers.services.engines import stall_verdict, tokens_processed

METRICS = """# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny-llama"} 120.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 30.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 7.0
"""


def test_tokens_processed_sums_the_two_counters_and_nothing_else():
    assert tokens_processed(METRICS) == 150.0
    assert tokens_processed("# TYPE other counter\nother_total 5.0\n") is None


@pytest.mark.parametrize(
    ("before", "after", "stuck"),
    [
        (150.0, 151.0, False),  # slow but working: its counters moved
        (150.0, 150.0, True),  # nothing processed while the request waited
        (None, None, True),  # no counters to show progress
        (150.0, None, True),
    ],
)
def test_an_unfinished_probe_is_stuck_only_when_the_counters_stood_still(before, after, stuck):
    verdict = stall_verdict(before, after, 3.0)
    assert verdict.startswith("engine.stalled") is stuck
    assert (verdict == "") is not stuck

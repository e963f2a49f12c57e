"""A tenant's per-request bounds at the gateway (its plan): the fields, their defaults (set by
platform admins in settings.GATEWAY_PLAN_DEFAULTS) and the validator every one of them carries."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator

# Field name -> what it bounds (the pages' and the API schema's help text).
REQUEST_BOUNDS = {
    "max_in_flight_requests": "requests of this tenant in flight at once, across every replica",
    "max_n": "n and best_of: sequences one request may run",
    "max_prompts": "prompts in one /v1/completions request",
    "max_tokens": "max_tokens / max_completion_tokens (and min_tokens) of one request; the cap "
    "sent for a request that names none",
    "max_logprobs": "logprobs / top_logprobs of one request",
    "max_prompt_logprobs": "prompt_logprobs of one request",
    "max_prompt_bytes": "bytes of prompt in one request: prompt and suffix, or every string of "
    "the messages plus tools and functions",
    "max_structured_output_bytes": "bytes of a structured-output schema, grammar or regex",
}

# Field name -> what it bounds: a tenant's eval suites (evals/), checked when a suite is uploaded.
EVAL_BOUNDS = {
    "eval_max_cases": "cases in one eval suite",
    "eval_max_suite_bytes": "bytes of one eval suite file (JSON Lines)",
    "eval_max_case_tokens": "max_tokens one eval case may ask for",
}

AT_LEAST_ONE = [MinValueValidator(1)]


def _default(name: str) -> int:
    return int(settings.GATEWAY_PLAN_DEFAULTS[name])


# Module-level callables: migrations refer to them by name.
def default_max_in_flight_requests() -> int:
    return _default("max_in_flight_requests")


def default_max_n() -> int:
    return _default("max_n")


def default_max_prompts() -> int:
    return _default("max_prompts")


def default_max_tokens() -> int:
    return _default("max_tokens")


def default_max_logprobs() -> int:
    return _default("max_logprobs")


def default_max_prompt_logprobs() -> int:
    return _default("max_prompt_logprobs")


def default_max_prompt_bytes() -> int:
    return _default("max_prompt_bytes")


def default_max_structured_output_bytes() -> int:
    return _default("max_structured_output_bytes")


def _eval_default(name: str) -> int:
    return int(settings.EVAL_PLAN_DEFAULTS[name])


def default_eval_max_cases() -> int:
    return _eval_default("eval_max_cases")


def default_eval_max_suite_bytes() -> int:
    return _eval_default("eval_max_suite_bytes")


def default_eval_max_case_tokens() -> int:
    return _eval_default("eval_max_case_tokens")

"""Uploading eval suites: immutable versions by sha256, every bad line refused with its number
and nothing kept, the plan's limits, tenants apart."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from core.audit_models import AuditEvent
from evals.models import EvalSuite, EvalSuiteVersion
from tests.evals.suites import CASES, jsonl, push

pytestmark = pytest.mark.django_db


def test_it_stores_a_suite_version_by_its_sha256_and_lists_it(world):
    raw = jsonl(*CASES)
    response = push(world.client("bob"), "acme", "support-qa", raw)
    assert response.status_code == 201, response.json()
    (version,) = response.json()["versions"]
    assert version["sha256"] == hashlib.sha256(raw).hexdigest()
    assert (version["number"], version["case_count"], version["must_pass_count"]) == (1, 3, 1)
    stored = EvalSuiteVersion.objects.get()
    assert stored.content.encode() == raw and stored.cases[1]["must_pass"] is True
    assert AuditEvent.objects.filter(action="eval_suite.upload").count() == 1
    listed = world.client("vera").get("/api/v1/tenants/acme/eval-suites/").json()["results"]
    assert [s["name"] for s in listed] == ["support-qa"]


def test_the_same_bytes_are_the_same_version_and_new_bytes_a_new_one(world):
    client = world.client("bob")
    assert push(client, "acme", "qa", jsonl(*CASES)).status_code == 201
    again = push(client, "acme", "qa", jsonl(*CASES))
    assert again.status_code == 200 and len(again.json()["versions"]) == 1
    changed = push(client, "acme", "qa", jsonl(*CASES[:2]))
    assert changed.status_code == 201
    assert [v["number"] for v in changed.json()["versions"]] == [2, 1]
    assert EvalSuiteVersion.objects.get(number=1).case_count == 3  # the old one is untouched


def test_a_bad_line_is_refused_with_its_number_and_nothing_is_kept(world):
    raw = jsonl(CASES[0], {"id": "x", "prompt": "p", "expect": {"regex": "(a"}}, CASES[2])
    raw += b'{"id": "greet", "prompt": "again"}\nnot json\n'
    response = push(world.client("bob"), "acme", "qa", raw)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "suite.invalid"
    assert error["message"].startswith("Line 2: regex is not a pattern RE2 accepts")
    assert [(e["line"], e["code"]) for e in error["details"]["errors"]] == [
        (2, "case.bad_expect"),
        (4, "case.duplicate_id"),
        (5, "case.not_json"),
    ]
    assert not EvalSuite.objects.exists() and not EvalSuiteVersion.objects.exists()


@pytest.mark.parametrize(
    ("plan", "raw", "code"),
    [
        ({"eval_max_cases": 2}, jsonl(*CASES), "suite.too_many_cases"),
        ({"eval_max_suite_bytes": 100}, jsonl(*CASES), "suite.too_large"),
        ({"eval_max_case_tokens": 4}, jsonl(CASES[0]), "case.max_tokens_over_plan"),
    ],
)
def test_the_plans_limits_refuse_a_suite(world, plan, raw, code):
    for name, value in plan.items():
        setattr(world.acme, name, value)
    world.acme.save()
    response = push(world.client("bob"), "acme", "qa", raw)
    assert response.status_code == 400
    assert response.json()["error"]["details"]["errors"][0]["code"] == code
    assert not EvalSuiteVersion.objects.exists()


def test_a_viewer_may_not_upload_and_another_tenant_sees_no_suite(world):
    assert push(world.client("vera"), "acme", "qa", jsonl(*CASES)).status_code == 403
    assert push(world.client("charlie"), "acme", "qa", jsonl(*CASES)).status_code == 404
    push(world.client("bob"), "acme", "qa", jsonl(*CASES))
    assert world.client("charlie").get("/api/v1/tenants/acme/eval-suites/").status_code == 404
    assert (
        world.client("charlie").get("/api/v1/tenants/globex/eval-suites/").json()["results"] == []
    )


def test_a_line_nested_too_deep_is_refused_with_its_number(world):
    """A line nested 100,000 deep fits the size limit; it raised RecursionError, a 500."""
    deep = '{"id": "d", "prompt": "p", "tags": ' + "[" * 100_000 + "]" * 100_000 + "}"
    just_over: dict[str, Any] = {
        "id": "o",
        "prompt": "p",
        "expect": {"json_schema": {"const": [[[]]]}},
    }
    for _ in range(60):
        just_over["expect"]["json_schema"]["const"] = [just_over["expect"]["json_schema"]["const"]]
    raw = jsonl(CASES[0]) + deep.encode() + b"\n" + jsonl(just_over)
    response = push(world.client("bob"), "acme", "qa", raw)
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "suite.invalid"
    assert error["message"].startswith("Line 2: The case nests deeper than 64 levels")
    assert [(e["line"], e["code"]) for e in error["details"]["errors"]] == [
        (2, "case.too_deep"),
        (3, "case.too_deep"),
    ]
    assert not EvalSuiteVersion.objects.exists()

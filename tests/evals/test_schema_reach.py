"""A suite's JSON Schema never reaches the network or the disk, and one answer's scoring is
bounded: a reference outside the schema is refused at upload, a stored schema that has one
(uploaded before the check) fetches nothing and scores as a failure, and a schema or answer whose
cost would stall a worker ends as a failure that says so. A real HTTP listener on loopback
counts what reaches it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evals.models import EvalCaseResult, EvalSuiteVersion
from evals.scoring.scorers import (
    MAX_ANSWER_CHARS,
    MAX_ANSWER_DEPTH,
    ExpectError,
    check_expect,
    score_answer,
)
from tests.evals.suites import CASES, jsonl, push


class Listener:
    """An HTTP server on 127.0.0.1 that answers every GET with a schema and keeps its paths."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                listener.paths.append(self.path)
                body = json.dumps({"type": "integer"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as running:
        yield running


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"type": "integer"}))
    return path


def outside_schemas(url: str, file: Path) -> list[dict]:
    """Schemas that point outside themselves, every way a schema can."""
    return [
        {"$ref": f"{url}/schema.json"},
        {"$ref": file.as_uri()},
        {"type": "object", "properties": {"a": {"$ref": f"{url}/nested.json"}}},
        {"$dynamicRef": f"{url}/dynamic.json"},
        {"$id": f"{url}/base.json", "$ref": "other.json"},
        {"$defs": {"x": {"$id": f"{url}/x.json"}}, "type": "integer"},
    ]


@pytest.mark.django_db
def test_a_schema_that_points_outside_itself_is_refused_at_upload_and_nothing_is_fetched(
    world, listener, secret_file
):
    """Before: `{"$ref": "http://127.0.0.1:PORT/schema.json"}` uploaded with 201."""
    client = world.client("bob")
    for schema in outside_schemas(listener.url, secret_file):
        case = {"id": "c", "prompt": "p", "expect": {"json_schema": schema}}
        response = push(client, "acme", "qa", jsonl(CASES[0], case))
        assert response.status_code == 400, (schema, response.json())
        error = response.json()["error"]
        assert error["code"] == "suite.invalid"
        assert error["message"].startswith("Line 2: json_schema may refer only inside itself")
        assert [(e["line"], e["code"]) for e in error["details"]["errors"]] == [
            (2, "case.bad_expect")
        ]
    assert listener.paths == []
    assert not EvalSuiteVersion.objects.exists()


def test_a_schema_that_refers_inside_itself_is_kept_and_scores():
    schema: dict[str, Any] = {
        "$defs": {"count": {"type": "integer", "minimum": 0}},
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/count"}, "tree": {"$ref": "#/$defs/node"}},
        "$anchor": "root",
    }
    schema["$defs"]["node"] = {"type": "array", "items": {"$ref": "#/$defs/node"}}
    check_expect({"json_schema": schema})
    assert score_answer('{"n": 3, "tree": [[], [[]]]}', {"json_schema": schema})[
        "json_schema"
    ].passed
    failed = score_answer('{"n": -1}', {"json_schema": schema})["json_schema"]
    assert not failed.passed and "minimum" in failed.why


def test_a_stored_schema_that_points_outside_fetches_nothing_and_fails(listener, secret_file):
    """A schema that reaches the scorer without the upload's check (a suite stored before it)."""
    # The last schema only names an $id nothing refers to: nothing to fetch, nothing to say.
    for schema in outside_schemas(listener.url, secret_file)[:-1]:
        verdict = score_answer('{"a": 3}', {"json_schema": schema})["json_schema"]
        assert verdict.passed is False, schema
        assert "nothing outside a suite is fetched" in verdict.why, (schema, verdict.why)
    # A $schema naming an unknown dialect is not fetched either (it is only a name).
    named = {"$schema": f"{listener.url}/dialect.json", "type": "integer"}
    assert score_answer("3", {"json_schema": named})["json_schema"].passed
    assert listener.paths == []


@pytest.mark.django_db
def test_a_run_on_an_old_stored_suite_records_the_refusal_and_fetches_nothing(world, listener):
    from evals.services.runs import run_create, run_record_case
    from tests.evals.runs import suite_version
    from tests.gateway.recording import version

    case = {"id": "shape", "prompt": "JSON?", "expect": {"json_schema": {"type": "integer"}}}
    suite = suite_version(world, jsonl(case))
    stored = [{**suite.cases[0], "expect": {"json_schema": {"$ref": f"{listener.url}/s.json"}}}]
    EvalSuiteVersion.objects.filter(pk=suite.pk).update(cases=stored)
    suite.refresh_from_db()
    run = run_create(
        version=version(world.support, 1), suite_version=suite, baseline="base", engines=["e"]
    )
    assert run_record_case(run=run, case=suite.cases[0], side="candidate", answer="3")
    verdict = EvalCaseResult.objects.get(run=run).verdicts["json_schema"]
    assert verdict["passed"] is False and "is not inside it" in verdict["why"]
    assert listener.paths == []


@pytest.mark.parametrize(
    ("expect", "says"),
    [
        ({"json_schema": {"unevaluatedProperties": False}}, "unevaluatedProperties"),
        ({"json_schema": {"items": {"unevaluatedItems": False}}}, "unevaluatedItems"),
    ],
)
def test_a_keyword_whose_work_escapes_the_budget_is_refused_at_upload(expect, says):
    with pytest.raises(ExpectError, match=says):
        check_expect(expect)


@pytest.mark.timeout(60)
def test_a_schema_whose_references_fan_out_ends_as_a_failure():
    """Each level tries both branches of the level below: 2^60 steps, a worker stalled for
    ever without the budget. A small file, and only references inside itself."""
    defs: dict = {"l0": {"type": "integer"}}
    for level in range(1, 61):
        below = {"$ref": f"#/$defs/l{level - 1}"}
        defs[f"l{level}"] = {"anyOf": [below, below]}
    schema = {"$defs": defs, "$ref": "#/$defs/l60"}
    check_expect({"json_schema": schema})
    verdict = score_answer('"not an integer"', {"json_schema": schema})["json_schema"]
    assert verdict.passed is False
    assert verdict.why.startswith("not scored: the schema took over")


@pytest.mark.timeout(60)
def test_unique_items_on_a_large_answer_is_linear():
    """jsonschema compares every pair of objects: 8,000 of them in an answer under the size
    bound were 32 million comparisons, minutes of a worker."""
    items = [{"k": i} for i in range(8_000)]
    schema = {"json_schema": {"type": "array", "uniqueItems": True}}
    compact: dict[str, Any] = {"separators": (",", ":")}
    assert len(json.dumps([*items, {"k": 7}], **compact)) <= MAX_ANSWER_CHARS
    assert score_answer(json.dumps(items, **compact), schema)["json_schema"].passed
    verdict = score_answer(json.dumps([*items, {"k": 7}], **compact), schema)["json_schema"]
    assert not verdict.passed and "not unique" in verdict.why
    # JSON Schema's equality: 1 and 1.0 are the same number, true is not 1.
    assert not score_answer("[1, 1.0]", schema)["json_schema"].passed
    assert score_answer("[1, true, [1], [true]]", schema)["json_schema"].passed


def test_a_self_referencing_schema_ends_as_a_failure():
    schema = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    verdict = score_answer("3", {"json_schema": schema})["json_schema"]
    assert verdict.passed is False and verdict.why.startswith("not scored")


@pytest.mark.parametrize("scorer", ["json", "json_schema"])
def test_an_answer_nested_too_deep_is_not_scored_and_does_not_raise(scorer):
    spec = {"json": True, "json_schema": {"items": {"$ref": "#"}}}[scorer]
    for depth in (MAX_ANSWER_DEPTH + 1, 40_000):  # 40,000: past the interpreter's stack
        verdict = score_answer("[" * depth + "]" * depth, {scorer: spec})[scorer]
        assert verdict.passed is False and "nested deeper than" in verdict.why
    at_bound = "[" * MAX_ANSWER_DEPTH + "]" * MAX_ANSWER_DEPTH
    assert score_answer(at_bound, {scorer: spec})[scorer].passed


def test_an_answer_over_the_size_bound_is_not_scored():
    answer = "a" * (MAX_ANSWER_CHARS + 1)
    verdicts = score_answer(answer, {"contains": ["a"], "regex": "a+$"})
    assert [v.passed for v in verdicts.values()] == [False, False]
    assert all(f"over {MAX_ANSWER_CHARS} characters" in v.why for v in verdicts.values())
    assert score_answer(answer[:-1], {"regex": "a+$"})["regex"].passed

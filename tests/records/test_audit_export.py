"""The audit export: CSV and JSON Lines, filtered, streamed in batches, each line carrying what
checks the chain; a tenant's owners export their tenant, platform admins and auditors all."""

from __future__ import annotations

import csv
import io
import json

import pytest

from core.audit import chain_key, compute_hash, event_from_content, record_event
from core.audit_models import AuditEvent
from portal import audit_export

pytestmark = pytest.mark.django_db
URL = "/api/v1/audit/export/"


def lines(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response.streaming
    body = b"".join(response.streaming_content).decode()
    return [json.loads(line) for line in body.splitlines()]


def export(history, who, **params):
    return history.world.client(who).get(URL, {"format": "jsonl", **params})


def test_owners_export_their_tenants_events_only(history):
    rows = lines(export(history, "alice", tenant="acme"))
    assert rows and {r["tenant"] for r in rows} == {"acme"}
    assert "version.approve" in {r["action"] for r in rows}
    # An owner of one tenant need not name it.
    assert lines(export(history, "alice"))[: len(rows)] == rows


@pytest.mark.parametrize("who", ["adam", "aude"])
def test_platform_admins_and_auditors_export_everything(history, who):
    tenants = {r["tenant"] for r in lines(export(history, who))}
    assert {"acme", "globex"} <= tenants


@pytest.mark.parametrize("who", ["bob", "vera", "rita", "olga", "nora"])
def test_maintainers_viewers_and_other_roles_may_not_export(history, who):
    response = export(history, who, tenant="acme")
    assert response.status_code in (403, 404)
    if who in ("bob", "vera"):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "audit.export_not_allowed"


def test_another_tenants_events_are_not_found(history):
    response = export(history, "charlie", tenant="acme")
    assert response.status_code == 404


def test_filters_by_action_prefix_and_time(history):
    rows = lines(export(history, "aude", action="version.*", tenant="acme"))
    assert {r["action"] for r in rows} == {
        "version.upload",
        "version.validate",
        "version.approve",
        "version.release",
    }
    assert lines(export(history, "aude", action="alias.set"))[0]["action"] == "alias.set"
    assert lines(export(history, "aude", **{"from": "2001-01-01", "to": "2001-01-02"})) == []


def test_an_unfiltered_range_links_line_to_line_and_each_hash_recomputes(history):
    rows = lines(export(history, "aude"))
    first = AuditEvent.objects.order_by("id").first()
    assert first is not None and rows[0]["id"] == first.pk
    for before, after in zip(rows, rows[1:], strict=False):
        assert after["prev_hash"] == before["hash"]
    key = chain_key()
    for row in rows:
        rebuilt = event_from_content(row, prev_hash=row["prev_hash"])
        assert compute_hash(row["prev_hash"], rebuilt, key=key) == row["hash"]


def test_csv_has_the_same_lines(history):
    response = history.world.client("aude").get(URL, {"format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    body = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    jsonl = lines(export(history, "aude"))
    assert [r["hash"] for r in rows] == [r["hash"] for r in jsonl[: len(rows)]]
    assert json.loads(rows[0]["after"] or "null") == jsonl[0]["after"]


def test_it_reads_in_batches_and_sends_each_as_it_comes(history, monkeypatch):
    for i in range(7):
        record_event(action="test.bulk", object_id=str(i))
    monkeypatch.setattr(audit_export, "EXPORT_BATCH", 3)
    response = export(history, "aude", action="test.bulk")
    chunks = list(response.streaming_content)
    assert [len(c.splitlines()) for c in chunks] == [3, 3, 1]


def test_an_export_is_audited(history):
    lines(export(history, "alice", tenant="acme", action="alias.set"))
    event = AuditEvent.objects.filter(action="audit.export").last()
    assert event is not None and event.after is not None
    assert event.actor_label == "alice" and event.tenant_label == "acme"
    assert event.after["action"] == "alias.set"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"format": "xml"}, "audit.bad_format"),
        ({"format": "csv", "from": "yesterday"}, "audit.bad_range"),
        ({"format": "csv", "from": "2026-02-02", "to": "2026-02-01"}, "audit.bad_range"),
    ],
)
def test_bad_input_is_a_clear_json_error(history, params, code):
    response = history.world.client("aude").get(URL, params)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert not AuditEvent.objects.filter(action="audit.export").exists()


@pytest.mark.django_db(transaction=True)
def test_under_asgi_it_streams_the_same_batches_asynchronously(world, monkeypatch):
    """What uvicorn serves (an async iterator; a sync one Django would read whole first)."""
    import asyncio

    from adapters.access import SystemAccess

    for i in range(7):
        record_event(action="test.async", object_id=str(i))
    monkeypatch.setattr(audit_export, "EXPORT_BATCH", 3)
    query = audit_export.export_query(
        access=SystemAccess(), params={"format": "jsonl", "action": "test.async"}
    )

    async def chunks() -> list[bytes]:
        return [chunk async for chunk in audit_export.export_stream(query)]

    got = asyncio.run(chunks())
    assert [len(c.splitlines()) for c in got] == [3, 3, 1]
    assert [json.loads(line)["object_id"] for c in got for line in c.splitlines()] == [
        str(i) for i in range(7)
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_file_is_checked_against_the_chain_line_by_line(history, tmp_path, fmt):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    response = history.world.client("aude").get(URL, {"format": fmt})
    path = tmp_path / f"audit.{fmt}"
    path.write_bytes(b"".join(response.streaming_content))
    out = io.StringIO()
    call_command("audit_verify", "--export", str(path), "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["ok"] and report["checked"] == AuditEvent.objects.count()  # its own too

    text = path.read_text()
    approve = AuditEvent.objects.get(action="version.approve")
    path.write_text(text.replace('"staged"', '"active"', 1))  # rita "approved" it into active
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify", "--export", str(path), stdout=io.StringIO())
    assert failed.value.returncode == 1
    assert f"audit event {approve.pk}: its fields do not give its hash" in str(failed.value)

"""Checking a compliance record against the live portal (`manage.py audit_verify --evidence`).

On top of the offline checks (lora_portal_client.evidence, pinned to this portal's keys: the
current one and those it signed with before a rotation): the
live chain is intact; the anchored head and checkpoint are still in it; each exported event's
hash, recomputed from the record's own fields with the chain key (core.audit.compute_hash), is
the hash of the row with that id; the version's files are the same; and what it served per day
is what the usage rows say (the export day may have grown since, never shrunk); each eval run's
cases are those it finished with (evals.records).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from itertools import islice
from pathlib import Path
from typing import Any

from django.db.models import Sum

from adapters.models import AdapterVersion
from core.audit import chain_key, compute_hash, event_from_content
from core.audit_models import AuditEvent
from evals.records import evals_problems
from gateway.models import DailyUsage
from portal.audit_verify import verify_chain
from portal.evidence_signing import portal_keys

SERVED_TOTALS = ("requests", "prompt_tokens", "completion_tokens")


def _event_problems(events: Iterable[dict[str, Any]]) -> list[str]:
    events = list(events)
    stored = dict(
        AuditEvent.objects.filter(pk__in=[e["id"] for e in events]).values_list("pk", "hash")
    )
    key = chain_key()
    problems = []
    for event in events:
        try:
            rebuilt = event_from_content(event, prev_hash=event["prev_hash"])
            recomputed = compute_hash(event["prev_hash"], rebuilt, key=key)
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"audit event {event.get('id')}: malformed ({exc})")
            continue
        if recomputed != event["hash"]:
            problems.append(
                f"audit event {event['id']}: its fields do not give its hash (changed in the record)"
            )
        if stored.get(event["id"]) != event["hash"]:
            problems.append(f"audit event {event['id']}: not the event with that id in the chain")
    return problems


def _anchor_problems(anchor: dict[str, Any]) -> list[str]:
    problems = []
    for name in ("chain_head", "checkpoint"):
        point = anchor.get(name)
        if not point or not point.get("event_id"):
            continue
        if not AuditEvent.objects.filter(pk=point["event_id"], hash=point["hash"]).exists():
            problems.append(
                f"anchor: the {name.replace('_', ' ')} #{point['event_id']} is no longer in the "
                "chain with that hash"
            )
    return problems


def _served_problems(version: AdapterVersion, served: dict[str, Any], exported: date) -> list[str]:
    live: dict[str, dict[str, Any]] = {
        row["day"].isoformat(): dict(row)
        for row in DailyUsage.objects.filter(version=version)
        .values("day")
        .annotate(**{name: Sum(name) for name in SERVED_TOTALS})
    }
    problems = []
    for day in served.get("by_day", []):
        now = live.get(day["day"], dict.fromkeys(SERVED_TOTALS, 0))
        for name in SERVED_TOTALS:
            still_open = day["day"] >= exported.isoformat()  # usage of the export day still grew
            wrong = now[name] < day[name] if still_open else now[name] != day[name]
            if wrong:
                problems.append(
                    f"served: {day['day']} {name} is {day[name]} in the record, "
                    f"{now[name]} in the portal"
                )
    return problems


def check_record(record: dict[str, Any]) -> list[str]:
    """The problems found; [] means the record is genuine and still matches the portal."""
    from lora_portal_client.evidence import PinnedKeys, verify_record

    keys = portal_keys()
    if keys:
        problems = verify_record(record, pinned=PinnedKeys.parse(keys))
    else:
        problems = [*verify_record(record), "this portal has no evidence key to check against"]
    chain = verify_chain()
    if not chain.ok:
        problems.append(f"the audit chain is broken at #{chain.first_broken_id}: {chain.reason}")
    try:
        meta = record["version"]
        version = AdapterVersion.objects.get(
            tenant__slug=meta["tenant"], adapter__name=meta["adapter"], number=meta["number"]
        )
        exported = datetime.fromisoformat(record["generated_at"]).date()
    except (KeyError, TypeError, ValueError, AdapterVersion.DoesNotExist):
        return [*problems, "version: the record names no version of this portal"]
    if (version.manifest, version.manifest_sha256) != (meta["manifest"], meta["manifest_sha256"]):
        problems.append("version: its files (manifest) differ from the portal's")
    problems += _anchor_problems(record.get("anchor") or {})
    problems += _event_problems(record.get("audit_events") or [])
    problems += _served_problems(version, record.get("served") or {}, exported)
    problems += evals_problems(version, record.get("evals"))
    return problems


def _export_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The lines of a JSON Lines or CSV audit export, as event dicts (CSV cells decoded)."""
    with path.open(encoding="utf-8", newline="") as lines:
        if path.suffix == ".csv":
            for row in csv.DictReader(lines):
                yield {
                    **row,
                    "id": int(row["id"]),
                    "actor_id": int(row["actor_id"]) if row["actor_id"] else None,
                    "tenant_id": int(row["tenant_id"]) if row["tenant_id"] else None,
                    "before": json.loads(row["before"]) if row["before"] else None,
                    "after": json.loads(row["after"]) if row["after"] else None,
                }
        else:
            yield from (json.loads(line) for line in lines if line.strip())


def check_export(path: Path, *, batch: int = 2000) -> tuple[int, list[str]]:
    """An audit export against the live chain: each line's hash recomputed from its fields with
    the chain key and found at its id, read `batch` lines at a time. (lines checked, problems)"""
    chain = verify_chain()
    problems = [] if chain.ok else [f"the audit chain is broken at #{chain.first_broken_id}"]
    checked, rows = 0, _export_rows(path)
    try:
        while chunk := list(islice(rows, batch)):
            problems += _event_problems(chunk)
            checked += len(chunk)
    except (KeyError, TypeError, ValueError) as exc:
        problems.append(f"line {checked + 1} or after: not an export line ({exc})")
    return checked, problems

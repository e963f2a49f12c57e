"""Re-key the audit chain: event hashes become HMACs with AUDIT_CHAIN_KEY (core.audit).

The existing chain is first verified under the old, unkeyed scheme; a chain that was already
broken is not re-keyed (that would launder the break) and the migration stops with the event.
"""

import hashlib
import json

from django.db import migrations

GENESIS = "0" * 64


def _old_hash(prev_hash, event):
    from core.audit import _content

    payload = json.dumps(_content(event), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{prev_hash}\n{payload}".encode()).hexdigest()


def rekey(apps, schema_editor):
    from core.audit import compute_hash

    event_model = apps.get_model("portal", "AuditEvent")
    head_model = apps.get_model("portal", "AuditChainHead")
    events = list(event_model.objects.order_by("pk"))
    if not events:
        return
    old_prev = GENESIS
    for event in events:
        if event.prev_hash != old_prev or _old_hash(old_prev, event) != event.hash:
            raise RuntimeError(
                f"audit chain broken at event #{event.pk} before re-keying; not re-keyed. "
                "Investigate with the previous release's `manage.py audit_verify`."
            )
        old_prev = event.hash
    postgres = schema_editor.connection.vendor == "postgresql"
    if postgres:
        schema_editor.execute(
            "ALTER TABLE portal_auditevent DISABLE TRIGGER portal_auditevent_no_update_delete"
        )
    prev = GENESIS
    for event in events:
        event.prev_hash = prev
        event.hash = compute_hash(prev, event)
        event_model.objects.filter(pk=event.pk).update(prev_hash=event.prev_hash, hash=event.hash)
        prev = event.hash
    if postgres:
        schema_editor.execute(
            "ALTER TABLE portal_auditevent ENABLE TRIGGER portal_auditevent_no_update_delete"
        )
    head_model.objects.filter(pk=1).update(last_hash=prev, last_event_id=events[-1].pk)


class Migration(migrations.Migration):
    dependencies = [("portal", "0002_audit_append_only")]

    operations = [migrations.RunPython(rekey, migrations.RunPython.noop)]

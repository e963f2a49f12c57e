"""Make the audit table append-only on PostgreSQL and create the chain head.

UPDATE and DELETE are refused for everyone. TRUNCATE is refused too, unless the session sets
`lora_portal.audit_maintenance = on` (the test suite's database flush does; production never
should). A database owner can still disable triggers: that is what the hash chain is for.
"""

from django.db import migrations

REFUSE_FUNCTION = """
CREATE OR REPLACE FUNCTION portal_audit_refuse_change() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' AND current_setting('lora_portal.audit_maintenance', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'audit events are append-only: %% refused on %%', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""

TRIGGERS = """
CREATE TRIGGER portal_auditevent_no_update_delete
    BEFORE UPDATE OR DELETE ON portal_auditevent
    FOR EACH ROW EXECUTE FUNCTION portal_audit_refuse_change();
CREATE TRIGGER portal_auditevent_no_truncate
    BEFORE TRUNCATE ON portal_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION portal_audit_refuse_change();
"""

DROP = """
DROP TRIGGER IF EXISTS portal_auditevent_no_update_delete ON portal_auditevent;
DROP TRIGGER IF EXISTS portal_auditevent_no_truncate ON portal_auditevent;
DROP FUNCTION IF EXISTS portal_audit_refuse_change();
"""


def install_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(REFUSE_FUNCTION)
        schema_editor.execute(TRIGGERS)


def remove_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


def create_head(apps, schema_editor):
    head = apps.get_model("portal", "AuditChainHead")
    head.objects.get_or_create(pk=1, defaults={"last_hash": "0" * 64})


class Migration(migrations.Migration):
    dependencies = [("portal", "0001_initial")]

    operations = [
        migrations.RunPython(install_triggers, remove_triggers),
        migrations.RunPython(create_head, migrations.RunPython.noop),
    ]

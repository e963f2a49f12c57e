from django.db import migrations


def create_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name="auditor")


class Migration(migrations.Migration):
    dependencies = [("tenants", "0004_slugs_without_double_hyphen")]

    operations = [migrations.RunPython(create_group, migrations.RunPython.noop)]

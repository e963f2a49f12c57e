from django.db import migrations

PLATFORM_GROUPS = ("platform-admin", "reviewer", "operator")


def create_groups(apps, schema_editor):
    group = apps.get_model("auth", "Group")
    for name in PLATFORM_GROUPS:
        group.objects.get_or_create(name=name)


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]

"""Every policy now holds a suite version (0004 pinned the existing ones)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("evals", "0004_policy_pins_suite_version"),
    ]

    operations = [
        migrations.AlterField(
            model_name="evalpolicy",
            name="suite_version",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="policies",
                to="evals.evalsuiteversion",
            ),
        ),
    ]

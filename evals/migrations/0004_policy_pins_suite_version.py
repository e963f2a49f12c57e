"""The policy holds a suite version (chosen by an owner) and whether ties pass the judge.

Each existing policy is pinned to its suite's latest version at migration time: what its gate
read until now (runs used the latest), so no gate changes meaning by the migration itself.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def pin_to_latest(apps, schema_editor):
    EvalPolicy = apps.get_model("evals", "EvalPolicy")
    EvalSuiteVersion = apps.get_model("evals", "EvalSuiteVersion")
    for policy in EvalPolicy.objects.all():
        latest = EvalSuiteVersion.objects.filter(suite_id=policy.suite_id).order_by("-number")
        policy.suite_version = latest.first()
        policy.suite_version_set_by_id = policy.updated_by_id
        policy.suite_version_set_at = policy.updated_at
        policy.save(update_fields=["suite_version", "suite_version_set_by", "suite_version_set_at"])


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("evals", "0003_run_heartbeat"),
    ]

    operations = [
        migrations.AddField(
            model_name="evalpolicy",
            name="suite_version",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="policies",
                to="evals.evalsuiteversion",
            ),
        ),
        migrations.AddField(
            model_name="evalpolicy",
            name="suite_version_set_by",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="evalpolicy",
            name="suite_version_set_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="evalpolicy",
            name="pairwise_ties_pass",
            field=models.BooleanField(
                default=False, help_text="whether a real tie (TIE in both orders) passes the judge"
            ),
        ),
        migrations.RunPython(pin_to_latest, migrations.RunPython.noop),
    ]

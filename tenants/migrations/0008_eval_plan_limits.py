import django.core.validators
from django.db import migrations, models

import tenants.plan


def _bounded(default):
    return models.PositiveIntegerField(
        default=default, validators=[django.core.validators.MinValueValidator(1)]
    )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0006_request_bounds"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="eval_max_cases",
            field=_bounded(tenants.plan.default_eval_max_cases),
        ),
        migrations.AddField(
            model_name="tenant",
            name="eval_max_suite_bytes",
            field=_bounded(tenants.plan.default_eval_max_suite_bytes),
        ),
        migrations.AddField(
            model_name="tenant",
            name="eval_max_case_tokens",
            field=_bounded(tenants.plan.default_eval_max_case_tokens),
        ),
    ]

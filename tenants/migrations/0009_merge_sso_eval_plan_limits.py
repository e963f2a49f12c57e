"""Joins the two branches of tenants' migrations: single sign-on (0007) and the eval plan's
limits (0008), both made on 0006. No operations."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0007_sso"),
        ("tenants", "0008_eval_plan_limits"),
    ]

    operations: list = []

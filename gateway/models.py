"""Usage counted per tenant, adapter version and day, for chargeback."""

from __future__ import annotations

from django.db import models

from adapters.models import AdapterVersion
from tenants.models import Tenant


class DailyUsage(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    version = models.ForeignKey(
        AdapterVersion, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    day = models.DateField()
    requests = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "version", "day"], name="dailyusage_unique")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.version_id} {self.day}"

"""Usage counted per tenant, adapter version and day, for chargeback; the price of an engine-hour."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

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
    # Sum of the requests' end-to-end times: each held one of an engine's batch slots (and its
    # adapter a GPU LoRA slot) from admission to its last token. What the cost view shares by.
    slot_seconds = models.FloatField(default=0.0)
    # Of the above, what release plans' shadow pairs asked (evals.services.shadow_pairs): the
    # tenant's usage all the same, labelled apart.
    shadow_requests = models.PositiveBigIntegerField(default=0)
    shadow_prompt_tokens = models.PositiveBigIntegerField(default=0)
    shadow_completion_tokens = models.PositiveBigIntegerField(default=0)
    # The service class the requests were admitted as (docs/classes.md; '' classes off, or
    # recorded before classes): a token in a lower class than its tenant's bills apart.
    service_class = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "version", "service_class", "day"], name="dailyusage_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.version_id} {self.day}"


class CostSettings(models.Model):
    """One row: what the cost view prices engine-hours at (set by platform admins, audited)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    price_per_engine_hour = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    currency = models.CharField(max_length=3, default="USD")
    # How many requests one dedicated endpoint serves at once (its --max-num-seqs): sizes the
    # dedicated comparison's endpoints from each adapter's slot-seconds.
    dedicated_slots = models.PositiveIntegerField(default=8)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.price_per_engine_hour} {self.currency} per engine-hour"

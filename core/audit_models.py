"""The append-only, hash-chained audit log's tables.

They keep the `portal` app label (docs/decisions/0010-audit-tables-home.md): their tables, and
the migrations that made them append-only (triggers) and chained, belong to the portal app, which
lists them in portal/models.py. The code lives here so the apps that record events import the
shared base, not the site.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        db_constraint=False,
        related_name="+",
    )
    # The actor's name at the time; the chain must not depend on rows that may change later.
    actor_label = models.CharField(max_length=150, blank=True, default="")
    tenant = models.ForeignKey(
        "tenants.Tenant",
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        db_constraint=False,
        related_name="+",
    )
    tenant_label = models.CharField(max_length=40, blank=True, default="")
    action = models.CharField(max_length=60, db_index=True)
    object_type = models.CharField(max_length=60, blank=True, default="")
    object_id = models.CharField(max_length=200, blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True, default="")
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        app_label = "portal"
        ordering = ["id"]
        indexes = [models.Index(fields=["tenant", "id"], name="audit_tenant_id")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.action} {self.object_type}:{self.object_id}"


class AuditChainHead(models.Model):
    """One row, locked while appending, so concurrent writers extend the chain in order."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_hash = models.CharField(max_length=64)
    last_event_id = models.BigIntegerField(default=0)

    class Meta:
        app_label = "portal"

    def __str__(self) -> str:
        return f"audit chain head at #{self.last_event_id}"

"""Who signed in through which provider, and the mappings from claims to memberships."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.roles import PlatformRole, TenantRole


class SsoIdentity(models.Model):
    """One account at one provider: (issuer, subject) is the key, never the e-mail address
    (a provider may let its users change theirs, and two providers may both claim one)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities"
    )
    provider = models.CharField(max_length=64)
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    # For the four-eyes rule across accounts (adapters/access.py): set only when verified.
    verified_email = models.EmailField(blank=True, default="")
    # Platform roles the mapping gave, so the sync removes only those, never one given by hand.
    managed_platform_roles = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)
    # Sessions signed in before this were ended by the provider (back-channel logout).
    sessions_ended_at = models.DateTimeField(null=True, blank=True)
    # The refresh token of the last browser sign-in, sealed (tenants/sso/sealing.py), and the
    # last known ID token expiry: the server-side re-check of people who hold API tokens.
    refresh_token_sealed = models.TextField(blank=True, default="")
    id_token_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="ssoidentity_unique_sub")
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.subject}"


class SsoMapping(models.Model):
    """A claim value (a group) that gives a tenant role, or a platform role, at one provider."""

    provider = models.CharField(max_length=64)
    claim = models.CharField(max_length=100)
    value = models.CharField(max_length=255)
    tenant = models.ForeignKey(
        "tenants.Tenant",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="sso_mappings",
    )
    role = models.CharField(max_length=12, choices=TenantRole.choices, blank=True, default="")
    platform_role = models.CharField(
        max_length=20, choices=PlatformRole.choices, blank=True, default=""
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["provider", "claim", "value", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(tenant__isnull=False) & ~Q(role="") & Q(platform_role=""))
                | (Q(tenant__isnull=True) & Q(role="") & ~Q(platform_role="")),
                name="ssomapping_tenant_role_or_platform_role",
            ),
            models.UniqueConstraint(
                fields=["provider", "claim", "value", "tenant", "platform_role"],
                name="ssomapping_unique_target",
                nulls_distinct=False,
            ),
        ]

    def __str__(self) -> str:
        target = self.platform_role or f"{self.tenant_id}:{self.role}"
        return f"{self.provider}:{self.claim}={self.value}->{target}"

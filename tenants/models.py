"""Tenants, memberships with roles, API tokens, signing keys."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from tenants import plan
from tenants.roles import PlatformRole, TenantRole  # noqa: F401 (PlatformRole: its old home)

# Single hyphens only: "--" separates tenant, adapter and version in served names
# (acme--support--v3-1f2e3d4c), so a slug holding it could pass for another tenant's.
SLUG_VALIDATOR = RegexValidator(
    r"^(?=[a-z0-9-]{1,40}$)[a-z0-9]+(?:-[a-z0-9]+)*$",
    "Use 1-40 lowercase letters, digits and single hyphens, starting and ending with a letter or digit.",
    code="invalid_slug",
)


class SloClass(models.TextChoices):
    GOLD = "gold"
    SILVER = "silver"
    BRONZE = "bronze"


class ServiceClass(models.Model):
    """A service class as a plan (docs/classes.md): its weight (share of a saturated engine
    against the other classes that want it), the longest its requests wait for a slot, and
    whether they may be shed. Platform admins edit them (tenants.services.service_classes)."""

    name = models.CharField(max_length=10, choices=SloClass.choices, unique=True)
    weight = models.PositiveIntegerField(validators=plan.AT_LEAST_ONE)
    max_queue_wait_ms = models.PositiveIntegerField(validators=plan.AT_LEAST_ONE)
    sheddable = models.BooleanField()
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-weight", "name"]

    def __str__(self) -> str:
        return self.name


class Tenant(models.Model):
    slug = models.CharField(max_length=40, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=200)
    slo_class = models.CharField(max_length=10, choices=SloClass.choices, default=SloClass.SILVER)
    quota_adapters = models.PositiveIntegerField(default=100)
    quota_storage_bytes = models.PositiveBigIntegerField(default=50 * 1024**3)
    quota_pinned_slots = models.PositiveIntegerField(default=1)
    quota_requests_per_minute = models.PositiveIntegerField(default=600)
    # The tenant's plan on shared engines, set by platform admins: engine-cache slots its
    # always-warm and business-hours adapters may hold (one per active version, like pins),
    # and the highest max_concurrent_requests one of its adapters may ask for.
    quota_warm_slots = models.PositiveIntegerField(default=2)
    max_adapter_concurrency = models.PositiveIntegerField(default=64, validators=plan.AT_LEAST_ONE)
    # Per-request bounds at the gateway (tenants/plan.py says what each bounds).
    max_in_flight_requests = models.PositiveIntegerField(
        default=plan.default_max_in_flight_requests, validators=plan.AT_LEAST_ONE
    )
    max_n = models.PositiveIntegerField(default=plan.default_max_n, validators=plan.AT_LEAST_ONE)
    max_prompts = models.PositiveIntegerField(
        default=plan.default_max_prompts, validators=plan.AT_LEAST_ONE
    )
    max_tokens = models.PositiveIntegerField(
        default=plan.default_max_tokens, validators=plan.AT_LEAST_ONE
    )
    max_logprobs = models.PositiveIntegerField(
        default=plan.default_max_logprobs, validators=plan.AT_LEAST_ONE
    )
    max_prompt_logprobs = models.PositiveIntegerField(
        default=plan.default_max_prompt_logprobs, validators=plan.AT_LEAST_ONE
    )
    max_prompt_bytes = models.PositiveIntegerField(
        default=plan.default_max_prompt_bytes, validators=plan.AT_LEAST_ONE
    )
    max_structured_output_bytes = models.PositiveIntegerField(
        default=plan.default_max_structured_output_bytes, validators=plan.AT_LEAST_ONE
    )
    # Eval suites (tenants/plan.py EVAL_BOUNDS says what each bounds).
    eval_max_cases = models.PositiveIntegerField(
        default=plan.default_eval_max_cases, validators=plan.AT_LEAST_ONE
    )
    eval_max_suite_bytes = models.PositiveIntegerField(
        default=plan.default_eval_max_suite_bytes, validators=plan.AT_LEAST_ONE
    )
    eval_max_case_tokens = models.PositiveIntegerField(
        default=plan.default_eval_max_case_tokens, validators=plan.AT_LEAST_ONE
    )
    require_signatures = models.BooleanField(default=False)
    pool = models.CharField(max_length=40, blank=True, default="")
    # IANA name; the calendar windows of the tenant's budgets (day, week, month) follow it.
    time_zone = models.CharField(max_length=64, default="UTC")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class MembershipSource(models.TextChoices):
    """Who keeps a membership: a person by hand, or the SSO mapping (tenants/sso), whose sync
    changes only the memberships it made."""

    MANUAL = "manual"
    SSO = "sso"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=12, choices=TenantRole.choices)
    source = models.CharField(
        max_length=8, choices=MembershipSource.choices, default=MembershipSource.MANUAL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")
        ]
        ordering = ["tenant_id", "user_id"]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.tenant_id}:{self.role}"


class TokenScope(models.TextChoices):
    READ = "read"
    WRITE = "write"
    APPROVE = "approve"
    INFERENCE = "inference"
    ADMIN = "admin"


class ApiToken(models.Model):
    """A bearer token `lp_<prefix>_<secret>`; only the secret's hash is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # A lower service class than its tenant's for this token's requests (a batch pipeline);
    # blank: its tenant's class (tenants.services.service_classes.token_class_set).
    service_class = models.CharField(
        max_length=10, choices=SloClass.choices, blank=True, default=""
    )
    # The token that minted this one, if any: revoking it revokes this one too.
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="children"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"lp_{self.prefix}_…"

    def is_active(self, now=None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class SigningKey(models.Model):
    """A tenant's trusted public key for adapter signatures."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="signing_keys")
    name = models.CharField(max_length=100, validators=[SLUG_VALIDATOR])
    public_key_pem = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="signingkey_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.name}"


# The SSO tables belong to this app (its migrations); their code lives in tenants/sso.
# So are the notification tables (tenants/notifications).
from tenants.notifications.models import (  # noqa: E402,F401
    Delivery,
    DeliveryAttempt,
    EmailRecipient,
    Notification,
    WebhookEndpoint,
)
from tenants.sso.models import SsoIdentity, SsoMapping  # noqa: E402,F401

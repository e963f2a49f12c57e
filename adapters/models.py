"""Base models, adapters, their versions and lifecycle, approvals and aliases."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from guardian.models import GroupObjectPermissionBase, UserObjectPermissionBase

from tenants.models import SLUG_VALIDATOR, SloClass, Tenant


class BaseModel(models.Model):
    """A base model the engines serve; module dims let validation check shapes without it."""

    name = models.CharField(max_length=100, unique=True, validators=[SLUG_VALIDATOR])
    source = models.CharField(max_length=500, help_text="HF id or local path; information only")
    revision = models.CharField(max_length=100, blank=True, default="")
    architecture = models.CharField(max_length=100)
    hf_config = models.JSONField(default=dict)
    module_dims = models.JSONField(default=dict, help_text="{module: [in, out]}")
    num_layers = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class WarmupPolicy(models.TextChoices):
    """How the fleet keeps an adapter's active version ready (workers/schedules.py)."""

    ON_DEMAND = "on_demand"  # loaded on the first request, evicted by the cache policy
    ALWAYS_WARM = "always_warm"  # kept in the engine cache on every engine of its pool
    PINNED = "pinned"  # pinned in a GPU slot on one engine of its pool (tenant pin quota)
    PRELOAD_BUSINESS_HOURS = "preload_on_business_hours"  # warm inside a window, on demand outside


class Adapter(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="adapters")
    name = models.CharField(max_length=40, validators=[SLUG_VALIDATOR])
    base_model = models.ForeignKey(BaseModel, on_delete=models.PROTECT, related_name="adapters")
    description = models.TextField(blank=True, default="")
    slo_class = models.CharField(max_length=10, choices=SloClass.choices, blank=True, default="")
    warmup_policy = models.CharField(
        max_length=40, choices=WarmupPolicy.choices, default=WarmupPolicy.ON_DEMAND
    )
    # The business-hours window of preload_on_business_hours: days (crontab day_of_week, e.g.
    # "mon-fri"), local start and end times, and the IANA time zone they are in.
    warmup_timezone = models.CharField(max_length=64, default="UTC")
    warmup_days = models.CharField(max_length=40, default="mon-fri")
    warmup_start = models.TimeField(null=True, blank=True)
    warmup_end = models.TimeField(null=True, blank=True)
    # At least 1: 0 once read as "no cap"; at most the tenant's plan (services).
    max_concurrent_requests = models.PositiveIntegerField(
        default=16, validators=[MinValueValidator(1)]
    )
    pool = models.CharField(max_length=40, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="adapter_unique_tenant_name")
        ]
        permissions = [
            ("upload_version", "Can upload versions of the adapter"),
            ("release_version", "Can release versions of the adapter"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    @property
    def effective_slo_class(self) -> str:
        return self.slo_class or self.tenant.slo_class

    @property
    def effective_max_concurrent_requests(self) -> int:
        """What the gateway admits: the adapter's own cap within its tenant's plan, so a plan a
        platform admin lowers binds adapters that asked for more before."""
        return min(self.max_concurrent_requests, self.tenant.max_adapter_concurrency)


class AdapterUserObjectPermission(UserObjectPermissionBase):
    """Direct foreign key: a grant dies with its adapter."""

    content_object = models.ForeignKey(Adapter, on_delete=models.CASCADE)


class AdapterGroupObjectPermission(GroupObjectPermissionBase):
    content_object = models.ForeignKey(Adapter, on_delete=models.CASCADE)


class VersionStatus(models.TextChoices):
    UPLOADED = "uploaded"
    VALIDATING = "validating"
    VALIDATED = "validated"
    REJECTED = "rejected"
    STAGED = "staged"
    ACTIVE = "active"
    DISABLED = "disabled"
    RETIRED = "retired"


SERVABLE_STATUSES = (VersionStatus.ACTIVE,)


class AdapterVersion(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="adapter_versions")
    adapter = models.ForeignKey(Adapter, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    status = models.CharField(
        max_length=12, choices=VersionStatus.choices, default=VersionStatus.UPLOADED, db_index=True
    )
    served_name = models.CharField(max_length=120, unique=True)
    manifest = models.JSONField(default=list, help_text="[{name, size, sha256}]")
    manifest_sha256 = models.CharField(max_length=64, blank=True, default="")
    rank = models.PositiveIntegerField(null=True, blank=True)
    alpha = models.FloatField(null=True, blank=True)
    target_modules = models.JSONField(default=list)
    dtype = models.CharField(max_length=16, blank=True, default="")
    size_bytes = models.PositiveBigIntegerField(default=0)
    config = models.JSONField(default=dict)
    signature = models.TextField(blank=True, default="")
    signer = models.CharField(max_length=100, blank=True, default="")
    validation_report = models.JSONField(default=dict)
    quarantine_keys = models.JSONField(default=dict, help_text="{filename: storage key}")
    serving_keys = models.JSONField(default=dict, help_text="{filename: storage key}")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    # The upload's span (W3C traceparent) when tracing was on: every later step of the version
    # (validate, approve, promote, release, stage, load) is in that trace or links to it.
    upload_traceparent = models.CharField(max_length=55, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    validated_at = models.DateTimeField(null=True, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["adapter_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["adapter", "number"], name="version_unique_number")
        ]
        indexes = [
            models.Index(fields=["tenant", "status"], name="version_tenant_status"),
            # Version lists are newest first (created_at, id), filtered by adapter, tenant or
            # status; these let PostgreSQL walk the index instead of sorting the whole set.
            models.Index(fields=["adapter", "created_at", "id"], name="version_adapter_created"),
            models.Index(fields=["tenant", "created_at", "id"], name="version_tenant_created"),
            models.Index(fields=["status", "created_at", "id"], name="version_status_created"),
        ]

    def __str__(self) -> str:
        return f"{self.adapter.name}@{self.number}"


class DecisionKind(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"
    RELEASE_APPROVAL = "release_approval"
    RELEASE = "release"
    DISABLE = "disable"
    RETIRE = "retire"


class Decision(models.Model):
    """Who decided what about a version, when, why, and the evidence they saw."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    version = models.ForeignKey(AdapterVersion, on_delete=models.CASCADE, related_name="decisions")
    kind = models.CharField(max_length=20, choices=DecisionKind.choices)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    comment = models.TextField(blank=True, default="")
    evidence = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} of version {self.version_id} by {self.actor_id}"


class Alias(models.Model):
    """A tenant-scoped model name callers use; points at weighted active versions.

    The guard fields drive the automatic rollback of a canary (adapters/services/releases.py):
    when the newest target's error rate or mean TTFT over the window passes its threshold, with
    at least `min_requests` requests, the alias is rolled back to its previous targets.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="aliases")
    name = models.CharField(max_length=40, validators=[SLUG_VALIDATOR])
    auto_rollback = models.BooleanField(default=False)
    max_error_rate = models.FloatField(
        default=0.05, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    max_ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    window_minutes = models.PositiveIntegerField(
        default=5, validators=[MinValueValidator(1), MaxValueValidator(60)]
    )
    min_requests = models.PositiveIntegerField(default=20, validators=[MinValueValidator(1)])
    # The share of its live answers the gateway samples for a release plan's live checks (0: no
    # plan runs). Set by the plan's service (evals.services.release_plans), read by the gateway
    # from its route tables, so sampling reads no row per request.
    live_sample_share = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="alias_unique_tenant_name")
        ]

    def __str__(self) -> str:
        return self.name


class AliasTarget(models.Model):
    alias = models.ForeignKey(Alias, on_delete=models.CASCADE, related_name="targets")
    version = models.ForeignKey(
        AdapterVersion, on_delete=models.PROTECT, related_name="alias_targets"
    )
    weight = models.PositiveIntegerField()
    # A canary's own cap on requests in flight; None: the adapter's max_concurrent_requests.
    # The gateway applies the lower of the two.
    max_concurrent = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )

    class Meta:
        ordering = ["-weight", "id"]
        constraints = [
            models.UniqueConstraint(fields=["alias", "version"], name="aliastarget_unique")
        ]

    def __str__(self) -> str:
        return f"{self.alias_id} -> {self.version_id} ({self.weight})"


class AliasRevisionAction(models.TextChoices):
    SET = "set"
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    AUTO_ROLLBACK = "auto_rollback"


class AliasRevision(models.Model):
    """One state of an alias's targets, kept so a release can be rolled back in one call.

    The newest revision is the alias's current targets. `parent` is the revision a rollback
    returns to: for a change, the revision it replaced; for a rollback to R, R's own parent,
    so rolling back twice walks further back instead of re-applying what was rolled back.
    """

    alias = models.ForeignKey(Alias, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    targets = models.JSONField(
        default=list, help_text="[{version, version_id, weight, max_concurrent}]"
    )
    parent = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    action = models.CharField(max_length=16, choices=AliasRevisionAction.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    actor_label = models.CharField(max_length=150, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    evidence = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["alias_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["alias", "number"], name="aliasrevision_unique_number")
        ]

    def __str__(self) -> str:
        return f"{self.alias_id} revision {self.number} ({self.action})"


class DirectUploadState(models.TextChoices):
    PENDING = "pending"
    COMPLETING = "completing"


class DirectUpload(models.Model):
    """A direct-to-S3 multipart upload of a version's model file, started and not yet finished.

    The row exists only while the upload is pending: completion turns it into a version and
    deletes it; abort, a failed completion or expiry delete it with its objects.
    """

    public_id = models.CharField(max_length=32, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="direct_uploads")
    adapter = models.ForeignKey(Adapter, on_delete=models.CASCADE, related_name="direct_uploads")
    state = models.CharField(
        max_length=12, choices=DirectUploadState.choices, default=DirectUploadState.PENDING
    )
    multipart_id = models.CharField(max_length=1024, help_text="the store's UploadId")
    model_key = models.CharField(max_length=1024)
    model_size = models.PositiveBigIntegerField()
    part_size = models.PositiveBigIntegerField()
    part_count = models.PositiveIntegerField()
    config_key = models.CharField(max_length=1024)
    config_size = models.PositiveBigIntegerField()
    config_sha256 = models.CharField(max_length=64)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["tenant", "expires_at"], name="directupload_tenant_exp")]

    def __str__(self) -> str:
        return f"{self.adapter.name} upload {self.public_id}"

    @property
    def reserved_bytes(self) -> int:
        return self.model_size + self.config_size

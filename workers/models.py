"""Engines (vLLM servers) and what each holds (residency)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from adapters.models import AdapterVersion, BaseModel
from tenants.models import SLUG_VALIDATOR

VALID_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class EngineState(models.TextChoices):
    WARMING = "warming"
    UP = "up"
    DRAINING = "draining"
    DOWN = "down"


class Engine(models.Model):
    name = models.CharField(max_length=40, unique=True, validators=[SLUG_VALIDATOR])
    base_model = models.ForeignKey(BaseModel, on_delete=models.PROTECT, related_name="engines")
    pool = models.CharField(max_length=40, default="shared", validators=[SLUG_VALIDATOR])
    url = models.URLField(help_text="Reachable only from workers and gateway")
    served_model_name = models.CharField(max_length=100)
    max_loras = models.PositiveIntegerField(default=4)
    max_cpu_loras = models.PositiveIntegerField(default=8)
    max_lora_rank = models.PositiveIntegerField(default=64)
    max_num_seqs = models.PositiveIntegerField(
        default=8, help_text="vLLM --max-num-seqs: requests it serves at once (engine choice)"
    )
    adapter_root = models.CharField(
        max_length=500, help_text="Directory on the engine's node where workers stage adapters"
    )
    state = models.CharField(
        max_length=10, choices=EngineState.choices, default=EngineState.WARMING
    )
    has_plugin = models.BooleanField(default=False)
    # Whether the plugin can see which adapters sit in GPU slots; if not, the hot tier is
    # inferred from recency (workers.engine_view.infer_gpu).
    gpu_observed = models.BooleanField(default=False)
    max_model_len = models.PositiveIntegerField(
        default=0,
        help_text="The engine's context length (vLLM --max-model-len) as its /v1/models reports "
        "it to the prober; 0 until seen. The gateway caps a request that names no max_tokens at "
        "the tenant plan's max_tokens, within this.",
    )
    required = models.BooleanField(
        default=True, help_text="Whether /healthz is degraded when this engine is down"
    )
    last_seen_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def queue(self) -> str:
        """The Celery queue consumed by the worker on this engine's node."""
        from django.conf import settings

        return f"{settings.ENGINE_QUEUE_PREFIX}{self.name}"


class ResidencyState(models.TextChoices):
    """Desired: what the controller keeps; observed: what the engine (plugin) last reported.

    Desired `registered` means "loaded on demand; the cache policy may evict it", `resident_gpu`
    "keep warm (always_warm, business hours)", `pinned` "pinned in a GPU slot".
    """

    ABSENT = "absent"
    REGISTERED = "registered"
    RESIDENT_CPU = "resident_cpu"
    RESIDENT_GPU = "resident_gpu"
    PINNED = "pinned"


class Residency(models.Model):
    engine = models.ForeignKey(Engine, on_delete=models.CASCADE, related_name="residencies")
    version = models.ForeignKey(
        AdapterVersion, on_delete=models.CASCADE, related_name="residencies"
    )
    desired_state = models.CharField(
        max_length=16, choices=ResidencyState.choices, default=ResidencyState.REGISTERED
    )
    observed_state = models.CharField(
        max_length=16, choices=ResidencyState.choices, default=ResidencyState.ABSENT
    )
    loaded_at = models.DateTimeField(null=True, blank=True)
    load_latency_ms = models.FloatField(null=True, blank=True)
    hits = models.PositiveBigIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Why it is desired ("on demand", "release", "schedule", "operator pin", ...), for the pages.
    desired_reason = models.CharField(max_length=200, blank=True, default="")
    # Files verified on the engine's node disk (the warm tier below the engine cache).
    staged_at = models.DateTimeField(null=True, blank=True)
    # The node's copy failed verification: moved aside, alarm raised, re-staged from the store.
    quarantined_at = models.DateTimeField(null=True, blank=True)
    quarantine_reason = models.TextField(blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    observed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["engine", "version"], name="residency_unique")
        ]
        ordering = ["engine_id", "version_id"]

    def __str__(self) -> str:
        return f"{self.engine_id}:{self.version_id} {self.observed_state}"


class FleetActionKind(models.TextChoices):
    STAGE = "stage"
    LOAD = "load"
    WARM = "warm"
    PIN = "pin"
    UNPIN = "unpin"
    EVICT = "evict"
    UNLOAD = "unload"
    QUARANTINE = "quarantine"
    CLEANUP = "cleanup"


class FleetAction(models.Model):
    """One action carried out on an engine or its node, with its latency: the controller's log.

    Load and eviction rates (thrash alarm, advisor) and the pages' history read it.
    """

    engine = models.ForeignKey(Engine, on_delete=models.CASCADE, related_name="actions")
    version = models.ForeignKey(
        AdapterVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    served_name = models.CharField(max_length=120, blank=True, default="")
    kind = models.CharField(max_length=12, choices=FleetActionKind.choices)
    reason = models.CharField(max_length=300, blank=True, default="")
    ok = models.BooleanField(default=True)
    error = models.TextField(blank=True, default="")
    latency_ms = models.FloatField(null=True, blank=True)
    actor = models.CharField(max_length=150, default="controller")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["engine", "kind", "created_at"], name="fleetaction_engine_kind")
        ]

    def __str__(self) -> str:
        return (
            f"{self.kind} {self.served_name} on {self.engine_id} ({'ok' if self.ok else 'failed'})"
        )


class AlarmKind(models.TextChoices):
    THRASH = "thrash"
    QUARANTINE = "quarantine"
    PLACEMENT = "placement"


class EngineAlarm(models.Model):
    """A condition operators must see: raised once, cleared when it ends (both audited)."""

    engine = models.ForeignKey(Engine, on_delete=models.CASCADE, related_name="alarms")
    kind = models.CharField(max_length=12, choices=AlarmKind.choices)
    subject = models.CharField(max_length=120, blank=True, default="")
    message = models.TextField()
    details = models.JSONField(default=dict)
    raised_at = models.DateTimeField(default=timezone.now)
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-raised_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["engine", "kind", "subject"],
                condition=models.Q(cleared_at__isnull=True),
                name="alarm_one_open",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} on {self.engine_id}: {self.message[:60]}"


class EngineUptime(models.Model):
    """One stretch of time an engine answered its probes: what engine-hours (cost) are made of.

    The prober opens a stretch at the first probe an engine answers, moves `last_seen_at` on at
    each one after it, and closes it at the first probe it does not answer. So a stretch is
    counted from the first to the last probe seen, an undercount of at most one probe period
    (30 s) at each end; an engine that stops being probed at all stops counting.
    """

    engine = models.ForeignKey(Engine, on_delete=models.CASCADE, related_name="uptimes")
    pool = models.CharField(max_length=40)  # the pool at the time: hours stay where they ran
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    closed = models.BooleanField(default=False)

    class Meta:
        ordering = ["engine_id", "started_at"]
        indexes = [models.Index(fields=["last_seen_at"], name="uptime_last_seen")]
        constraints = [
            models.UniqueConstraint(
                fields=["engine"], condition=models.Q(closed=False), name="uptime_one_open"
            )
        ]

    def __str__(self) -> str:
        return f"{self.engine_id} up {self.started_at} - {self.last_seen_at}"

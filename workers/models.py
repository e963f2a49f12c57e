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
    adapter_root = models.CharField(
        max_length=500, help_text="Directory on the engine's node where workers stage adapters"
    )
    state = models.CharField(
        max_length=10, choices=EngineState.choices, default=EngineState.WARMING
    )
    has_plugin = models.BooleanField(default=False)
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
        return f"engine.{self.name}"


class ResidencyState(models.TextChoices):
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
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["engine", "version"], name="residency_unique")
        ]
        ordering = ["engine_id", "version_id"]

    def __str__(self) -> str:
        return f"{self.engine_id}:{self.version_id} {self.observed_state}"

from __future__ import annotations

from rest_framework import serializers

from adapters.models import BaseModel
from workers.models import (
    VALID_MAX_LORA_RANKS,
    Engine,
    EngineAlarm,
    EngineState,
    FleetAction,
    Residency,
)
from workers.selectors import tier_of


class EngineSerializer(serializers.ModelSerializer):
    base_model = serializers.SlugRelatedField(slug_field="name", queryset=BaseModel.objects.all())
    queue = serializers.CharField(read_only=True)
    max_lora_rank = serializers.ChoiceField(choices=VALID_MAX_LORA_RANKS, default=64)
    # The prober's verdict (and drain/undrain) moves an engine's state; no client sets it.
    state = serializers.ChoiceField(choices=EngineState.choices, read_only=True)

    class Meta:
        model = Engine
        fields = [
            "name",
            "base_model",
            "pool",
            "url",
            "served_model_name",
            "max_loras",
            "max_cpu_loras",
            "max_lora_rank",
            "max_num_seqs",
            "adapter_root",
            "state",
            "has_plugin",
            "required",
            "queue",
            "last_seen_at",
            "last_error",
            "created_at",
        ]
        read_only_fields = ["has_plugin", "last_seen_at", "last_error", "created_at"]

    def validate(self, attrs):
        if "state" in getattr(self, "initial_data", {}):
            raise serializers.ValidationError(
                {"state": "set by the prober's verdict; use the drain and undrain actions."}
            )
        max_loras = attrs.get("max_loras", getattr(self.instance, "max_loras", 1))
        max_cpu = attrs.get("max_cpu_loras", getattr(self.instance, "max_cpu_loras", max_loras))
        if max_cpu < max_loras:
            raise serializers.ValidationError(
                {"max_cpu_loras": "must be at least max_loras (vLLM refuses less)."}
            )
        if max_loras < 1:
            raise serializers.ValidationError({"max_loras": "must be at least 1."})
        return attrs


class EngineUpdateSerializer(EngineSerializer):
    class Meta(EngineSerializer.Meta):
        read_only_fields = ["name", "base_model", *EngineSerializer.Meta.read_only_fields]


class ResidencySerializer(serializers.ModelSerializer):
    engine = serializers.CharField(source="engine.name")
    tenant = serializers.CharField(source="version.tenant.slug")
    version = serializers.SerializerMethodField()
    served_name = serializers.CharField(source="version.served_name")
    tier = serializers.SerializerMethodField(
        help_text="hot (GPU slot), warm (engine CPU cache or staged on the node), cold, disabled"
    )
    gpu_tier_source = serializers.SerializerMethodField(
        help_text="'observed' when the engine plugin reports GPU slots; 'inferred' from recency"
    )

    class Meta:
        model = Residency
        fields = [
            "engine",
            "tenant",
            "version",
            "served_name",
            "tier",
            "desired_state",
            "desired_reason",
            "observed_state",
            "gpu_tier_source",
            "staged_at",
            "quarantined_at",
            "quarantine_reason",
            "last_error",
            "loaded_at",
            "load_latency_ms",
            "hits",
            "last_used_at",
            "observed_at",
        ]

    def get_version(self, residency) -> str:
        return f"{residency.version.adapter.name}@{residency.version.number}"

    def get_tier(self, residency) -> str:
        return tier_of(residency)

    def get_gpu_tier_source(self, residency) -> str:
        return "observed" if residency.engine.gpu_observed else "inferred"


class VersionActionSerializer(serializers.Serializer):
    version = serializers.CharField(help_text="tenant/adapter@N")


class FleetActionSerializer(serializers.ModelSerializer):
    engine = serializers.CharField(source="engine.name")

    class Meta:
        model = FleetAction
        fields = [
            "engine",
            "served_name",
            "kind",
            "reason",
            "ok",
            "error",
            "latency_ms",
            "actor",
            "created_at",
        ]


class AlarmSerializer(serializers.ModelSerializer):
    engine = serializers.CharField(source="engine.name")

    class Meta:
        model = EngineAlarm
        fields = ["engine", "kind", "subject", "message", "details", "raised_at", "cleared_at"]


class AdviceSerializer(serializers.Serializer):
    engine = serializers.CharField()
    current = serializers.DictField(child=serializers.IntegerField())
    advised = serializers.DictField(child=serializers.IntegerField())
    changed = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())


class LaunchConfigSerializer(serializers.Serializer):
    engine = serializers.CharField()
    flags = serializers.ListField(child=serializers.CharField())
    lora_modules = serializers.ListField(child=serializers.DictField())

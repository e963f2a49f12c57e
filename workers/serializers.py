from __future__ import annotations

from rest_framework import serializers

from adapters.models import BaseModel
from workers.models import VALID_MAX_LORA_RANKS, Engine, EngineState, Residency


class EngineSerializer(serializers.ModelSerializer):
    base_model = serializers.SlugRelatedField(slug_field="name", queryset=BaseModel.objects.all())
    queue = serializers.CharField(read_only=True)
    max_lora_rank = serializers.ChoiceField(choices=VALID_MAX_LORA_RANKS, default=64)
    state = serializers.ChoiceField(choices=EngineState.choices, required=False)

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

    class Meta:
        model = Residency
        fields = [
            "engine",
            "tenant",
            "version",
            "served_name",
            "desired_state",
            "observed_state",
            "loaded_at",
            "load_latency_ms",
            "hits",
            "last_used_at",
        ]

    def get_version(self, residency) -> str:
        return f"{residency.version.adapter.name}@{residency.version.number}"

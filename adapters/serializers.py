from __future__ import annotations

from typing import Any

from django.db import models
from rest_framework import serializers

from adapters import warmup_window as window_rules
from adapters.models import (
    Adapter,
    AdapterVersion,
    Alias,
    AliasRevision,
    BaseModel,
    Decision,
    WarmupPolicy,
)
from adapters.services.aliases import VERSION_REF_PATTERN
from adapters.services.registry import ADAPTER_FIELDS
from tenants.models import SLUG_VALIDATOR, SloClass


class BaseModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = BaseModel
        fields = [
            "name",
            "source",
            "revision",
            "architecture",
            "module_dims",
            "num_layers",
            "created_at",
        ]
        read_only_fields = ["architecture", "module_dims", "num_layers", "created_at"]


class BaseModelCreateSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=100)
    # DRF's metaclass takes declared fields off the class: Field.source is not shadowed.
    source = serializers.CharField(max_length=500)  # type: ignore[assignment]
    revision = serializers.CharField(max_length=100, required=False, default="")
    hf_config = serializers.DictField(help_text="The model's config.json")


def _validate_timezone(value: str) -> None:
    if not window_rules.valid_timezone(value):
        raise serializers.ValidationError(
            f"'{value}' is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)."
        )


def _validate_days(value: str) -> None:
    if window_rules.parse_days(value) is None:
        raise serializers.ValidationError(
            f"'{value}' is not a crontab day_of_week (e.g. mon-fri, sat,sun, 1-5; Sunday is 0; "
            "a range may not wrap past Saturday)."
        )


class AdapterSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    base_model = serializers.SlugRelatedField(slug_field="name", queryset=BaseModel.objects.all())
    slo_class = serializers.ChoiceField(
        choices=[("", "inherit"), *SloClass.choices],
        required=False,
        help_text="Platform admins only; empty: the tenant's class",
    )
    pool = serializers.CharField(
        max_length=40,
        required=False,
        allow_blank=True,
        validators=[SLUG_VALIDATOR],
        help_text="Platform admins only; empty: the tenant's pool, else the default pool",
    )
    warmup_policy = serializers.ChoiceField(choices=WarmupPolicy.choices, required=False)
    warmup_timezone = serializers.CharField(
        max_length=64,
        required=False,
        validators=[_validate_timezone],
        help_text="IANA time zone of the warm-up window, e.g. Europe/Berlin",
    )
    warmup_days = serializers.CharField(
        max_length=40,
        required=False,
        validators=[_validate_days],
        help_text="Days of the warm-up window as a crontab day_of_week, e.g. mon-fri",
    )
    warmup_start = serializers.TimeField(
        format="%H:%M",
        input_formats=["%H:%M"],
        required=False,
        allow_null=True,
        help_text="Local start of the warm-up window, HH:MM",
    )
    warmup_end = serializers.TimeField(
        format="%H:%M",
        input_formats=["%H:%M"],
        required=False,
        allow_null=True,
        help_text="Local end of the warm-up window, HH:MM (before the start: over midnight)",
    )
    latest_version = serializers.IntegerField(read_only=True, allow_null=True, default=None)

    class Meta:
        model = Adapter
        fields = [
            "tenant",
            "name",
            "base_model",
            *ADAPTER_FIELDS,
            "created_at",
            "latest_version",
        ]
        read_only_fields = ["created_at"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # The window as it will be saved (a PATCH sends only what changes), checked by the same
        # rules the registry keeps, so the error names the field to fix.
        final = {k: attrs.get(k, self._current(k)) for k in WINDOW_FIELDS}
        if final["warmup_policy"] == WarmupPolicy.PRELOAD_BUSINESS_HOURS:
            window = window_rules.WarmupWindow(
                days=final["warmup_days"],
                start=final["warmup_start"],
                end=final["warmup_end"],
                timezone=final["warmup_timezone"],
            )
            errors: dict[str, list[str]] = {}
            for problem in window_rules.window_problems(window):
                errors.setdefault(problem.field, []).append(
                    problem.message.removeprefix(f"{problem.field}: ")
                )
            if errors:
                raise serializers.ValidationError(errors)
        return attrs

    def _current(self, name: str) -> Any:
        if self.instance is not None:
            return getattr(self.instance, name)
        field = Adapter._meta.get_field(name)
        if not isinstance(field, models.Field):  # a reverse relation has no default
            raise LookupError(f"Adapter.{name} is not a concrete field")
        return field.get_default()


WINDOW_FIELDS = ("warmup_policy", "warmup_timezone", "warmup_days", "warmup_start", "warmup_end")


class AdapterUpdateSerializer(AdapterSerializer):
    class Meta(AdapterSerializer.Meta):
        read_only_fields = ["name", "base_model", "created_at"]


class DecisionSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username")

    class Meta:
        model = Decision
        fields = ["kind", "actor", "comment", "created_at"]


class VersionSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug")
    adapter = serializers.CharField(source="adapter.name")
    uploaded_by = serializers.CharField(source="uploaded_by.username", default=None)

    class Meta:
        model = AdapterVersion
        fields = [
            "tenant",
            "adapter",
            "number",
            "status",
            "served_name",
            "rank",
            "alpha",
            "target_modules",
            "dtype",
            "size_bytes",
            "manifest_sha256",
            "signer",
            "uploaded_by",
            "created_at",
            "validated_at",
            "approved_at",
            "released_at",
        ]


class VersionDetailSerializer(VersionSerializer):
    decisions = DecisionSerializer(many=True)

    class Meta(VersionSerializer.Meta):
        fields = [
            *VersionSerializer.Meta.fields,
            "manifest",
            "config",
            "validation_report",
            "decisions",
        ]


class VersionUploadSerializer(serializers.Serializer):
    adapter_config = serializers.FileField(help_text="adapter_config.json")
    adapter_model = serializers.FileField(help_text="adapter_model.safetensors")
    signature = serializers.FileField(
        required=False, help_text="Detached signature or model-signing bundle"
    )


class CommentSerializer(serializers.Serializer):
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class ApproveSerializer(CommentSerializer):
    override_eval_gate = serializers.BooleanField(required=False, default=False)
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=4000)


class AliasTargetSerializer(serializers.Serializer):
    version = serializers.RegexField(VERSION_REF_PATTERN, help_text="adapter@N")
    weight = serializers.IntegerField(min_value=1, max_value=100)
    max_concurrent = serializers.IntegerField(
        min_value=1,
        max_value=100_000,
        required=False,
        allow_null=True,
        help_text="This target's own cap on requests in flight (a canary's); "
        "none: the adapter's max_concurrent_requests. The lower of the two applies.",
    )


class AliasGuardSerializer(serializers.Serializer):
    """Automatic rollback of the alias's canary (its newest target)."""

    auto_rollback = serializers.BooleanField(required=False)
    max_error_rate = serializers.FloatField(min_value=0.0, max_value=1.0, required=False)
    max_ttft_ms = serializers.IntegerField(
        min_value=1, max_value=3_600_000, required=False, allow_null=True
    )
    window_minutes = serializers.IntegerField(min_value=1, max_value=60, required=False)
    min_requests = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)


class AliasSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    targets = serializers.SerializerMethodField()
    guard = serializers.SerializerMethodField()

    class Meta:
        model = Alias
        fields = ["tenant", "name", "targets", "guard", "created_at", "updated_at"]

    def get_targets(self, alias: Alias) -> list[dict]:
        return [
            {
                "version": f"{t.version.adapter.name}@{t.version.number}",
                "weight": t.weight,
                "max_concurrent": t.max_concurrent,
                "status": t.version.status,
            }
            for t in alias.targets.all()
        ]

    def get_guard(self, alias: Alias) -> dict:
        # .keys(): iterating BindingDict yields names, but the stubs type it as yielding fields.
        names = AliasGuardSerializer().fields.keys()  # noqa: SIM118
        return {name: getattr(alias, name) for name in names}


class AliasWriteSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=40, required=False)
    targets = AliasTargetSerializer(many=True, allow_empty=False)
    guard = AliasGuardSerializer(required=False, help_text="Omitted settings keep their value")
    reason = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


class AliasPromoteSerializer(serializers.Serializer):
    version = serializers.RegexField(VERSION_REF_PATTERN, help_text="adapter@N")
    reason = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


class AliasRollbackSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


class AliasRevisionSerializer(serializers.ModelSerializer):
    # DRF's metaclass takes declared fields off the class: Field.parent is not shadowed.
    parent = serializers.IntegerField(  # type: ignore[assignment]
        source="parent.number", read_only=True, allow_null=True
    )
    actor = serializers.CharField(source="actor_label", read_only=True)

    class Meta:
        model = AliasRevision
        fields = [
            "number",
            "action",
            "targets",
            "parent",
            "actor",
            "reason",
            "evidence",
            "created_at",
        ]


class GrantSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    perms = serializers.ListField(child=serializers.CharField(max_length=40), min_length=1)


class DirectUploadStartSerializer(serializers.Serializer):
    model_size = serializers.IntegerField(
        min_value=1, help_text="Exact size of adapter_model.safetensors"
    )
    part_size = serializers.IntegerField(
        required=False, min_value=1, help_text="Bytes per part (5 MiB..5 GiB)"
    )
    config = serializers.CharField(
        required=False,
        trim_whitespace=False,
        allow_blank=False,
        help_text="The exact text of adapter_config.json (JSON requests)",
    )
    adapter_config = serializers.FileField(
        required=False, help_text="adapter_config.json (multipart requests)"
    )

    def validate(self, attrs):
        if ("config" in attrs) == ("adapter_config" in attrs):
            raise serializers.ValidationError(
                "Give the config once: `config` (its text) or `adapter_config` (a file)."
            )
        return attrs


class PartUrlSerializer(serializers.Serializer):
    part_number = serializers.IntegerField()
    size = serializers.IntegerField()
    url = serializers.URLField()


class DirectUploadSerializer(serializers.Serializer):
    upload = serializers.CharField(source="public_id")
    tenant = serializers.CharField(source="tenant.slug")
    adapter = serializers.CharField(source="adapter.name")
    state = serializers.CharField()
    model_size = serializers.IntegerField()
    part_size = serializers.IntegerField()
    part_count = serializers.IntegerField()
    config_sha256 = serializers.CharField()
    started_by = serializers.CharField(source="started_by.username")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()


class DirectUploadDetailSerializer(DirectUploadSerializer):
    parts = PartUrlSerializer(
        many=True, help_text="PUT each part's bytes to its url; keep the ETag header"
    )


class CompletedPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField(min_value=1, max_value=10_000)
    etag = serializers.CharField(max_length=200)


class DirectUploadCompleteSerializer(serializers.Serializer):
    # many=True hands max_length to ListSerializer (DRF 3.14+); the stubs' __init__ lacks it.
    parts = CompletedPartSerializer(  # type: ignore[call-arg]
        many=True, allow_empty=False, max_length=10_000
    )
    signature = serializers.CharField(
        required=False,
        trim_whitespace=False,
        max_length=400_000,
        help_text="Detached signature (base64) or model-signing bundle (JSON text)",
    )
    sha256 = serializers.RegexField(
        r"^[0-9a-fA-F]{64}$",
        required=False,
        help_text="The model file's sha256, checked against what was assembled",
    )


class PlacementSerializer(serializers.Serializer):
    """One engine's view of a version: hot (GPU slot), warm (engine cache or staged), cold, disabled."""

    engine = serializers.CharField()
    tier = serializers.CharField()
    desired_state = serializers.CharField()
    observed_state = serializers.CharField()
    staged = serializers.BooleanField()
    quarantined = serializers.BooleanField()
    load_latency_ms = serializers.FloatField(required=False, allow_null=True)
    loaded_at = serializers.DateTimeField(required=False, allow_null=True)

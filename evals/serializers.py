"""Shapes of the eval gate's REST edge."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from evals.models import EvalPolicy, EvalRun, EvalSuite, EvalSuiteVersion


class SuiteUploadSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=40)
    file = serializers.FileField(help_text="the suite, JSON Lines: one case a line")


class SuiteVersionSerializer(serializers.ModelSerializer):
    uploaded_by = serializers.CharField(source="uploaded_by.username", default=None)

    class Meta:
        model = EvalSuiteVersion
        fields = [
            "number",
            "sha256",
            "size_bytes",
            "case_count",
            "must_pass_count",
            "uploaded_by",
            "created_at",
        ]


class SuiteSerializer(serializers.ModelSerializer):
    versions = SuiteVersionSerializer(many=True)

    class Meta:
        model = EvalSuite
        fields = ["name", "created_at", "versions"]


class PolicySerializer(serializers.ModelSerializer):
    suite = serializers.CharField(source="suite.name")

    class Meta:
        model = EvalPolicy
        fields = [
            "suite",
            "min_pass_rate",
            "max_regression_points",
            "min_pairwise_win_or_tie",
            "judge",
            "rubric",
            "live_checks",
            "updated_at",
        ]
        read_only_fields = ["updated_at"]


class PolicyWriteSerializer(serializers.Serializer):
    suite = serializers.CharField(max_length=40)
    min_pass_rate = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=1
    )
    max_regression_points = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=100
    )
    min_pairwise_win_or_tie = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=1
    )
    judge = serializers.CharField(required=False, allow_blank=True, max_length=120)
    rubric = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    # Checks on live answers (evals.scoring.live_checks; the policy service checks each one).
    live_checks = serializers.JSONField(required=False)


class RunSerializer(serializers.ModelSerializer):
    id = serializers.IntegerField(source="number")
    suite = serializers.CharField(source="suite_version.suite.name")
    suite_version = serializers.IntegerField(source="suite_version.number")
    progress = serializers.SerializerMethodField()

    class Meta:
        model = EvalRun
        fields = [
            "id",
            "status",
            "progress",
            "suite",
            "suite_version",
            "suite_sha256",
            "version_sha256",
            "base_model",
            "baseline",
            "engines",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        ]

    def get_progress(self, run: EvalRun) -> dict[str, Any]:
        return {"done": run.cases_done, "total": run.cases_total}

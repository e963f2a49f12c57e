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
    suite_version = serializers.IntegerField(
        source="suite_version.number", help_text="the suite version the gate counts runs on"
    )
    suite_sha256 = serializers.CharField(source="suite_version.sha256")
    suite_version_set_by = serializers.CharField(
        source="suite_version_set_by.username", default=None
    )

    class Meta:
        model = EvalPolicy
        fields = [
            "suite",
            "suite_version",
            "suite_sha256",
            "suite_version_set_by",
            "suite_version_set_at",
            "min_pass_rate",
            "max_regression_points",
            "min_pairwise_win_or_tie",
            "pairwise_ties_pass",
            "judge",
            "rubric",
            "updated_at",
        ]
        read_only_fields = ["updated_at", "suite_version_set_at"]


class PolicyWriteSerializer(serializers.Serializer):
    suite = serializers.CharField(max_length=40)
    suite_version = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**31 - 1,  # the column's range: beyond it, no such version
        help_text="the suite version the gate counts runs on; left out: the one the policy "
        "holds (or, for a suite chosen now, its latest). A newer upload is the gate's only "
        "once an owner names it here.",
    )
    min_pass_rate = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=1
    )
    max_regression_points = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=100
    )
    min_pairwise_win_or_tie = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=1
    )
    pairwise_ties_pass = serializers.BooleanField(
        required=False,
        help_text="whether a real tie (TIE in both orders) passes min_pairwise_win_or_tie "
        "(default false)",
    )
    judge = serializers.CharField(required=False, allow_blank=True, max_length=120)
    rubric = serializers.CharField(required=False, allow_blank=True, max_length=2000)


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

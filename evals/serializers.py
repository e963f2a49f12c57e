"""Shapes of the eval gate's REST edge."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from adapters.services.aliases import VERSION_REF_PATTERN
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
            "live_checks",
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


# --- release plans ---


class ReleaseStepSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    weight = serializers.IntegerField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    outcome = serializers.CharField()
    samples = serializers.SerializerMethodField()
    guards = serializers.JSONField(help_text="{guard: {decision, reason, estimate, interval, ...}}")
    evaluated_at = serializers.DateTimeField(allow_null=True)
    shadow = serializers.SerializerMethodField(
        help_text="a shadow step's pairs by the judge's outcome and its skipped requests by why; "
        "null for a weighted step"
    )

    def get_samples(self, step: Any) -> dict[str, dict[str, int]]:
        return {
            "stable": {"n": step.stable_n, "passed": step.stable_passed},
            "candidate": {"n": step.candidate_n, "passed": step.candidate_passed},
        }

    def get_shadow(self, step: Any) -> dict[str, Any] | None:
        if step.weight:
            return None
        return {
            "pairs": step.pairs,
            "pairs_n": sum(step.pairs.values()),
            "skipped": step.shadow_skipped,
            "skipped_n": sum(step.shadow_skipped.values()),
        }


class ReleaseDecisionSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    action = serializers.CharField()
    automatic = serializers.BooleanField()
    actor = serializers.SerializerMethodField()
    reason = serializers.CharField()
    numbers = serializers.JSONField()
    created_at = serializers.DateTimeField()

    def get_actor(self, decision: Any) -> str:
        return decision.actor.get_username() if decision.actor else "release-controller"


class ReleasePlanSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    alias = serializers.CharField(source="alias.name")
    stable = serializers.SerializerMethodField()
    candidate = serializers.SerializerMethodField()
    status = serializers.CharField()
    steps = serializers.JSONField()
    current_step = serializers.IntegerField()
    min_step_seconds = serializers.IntegerField()
    min_step_samples = serializers.IntegerField()
    sample_share = serializers.FloatField()
    alpha = serializers.FloatField()
    margin = serializers.FloatField()
    keep_text_days = serializers.IntegerField()
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    step_rows = ReleaseStepSerializer(many=True, source="step_rows.all")
    decisions = ReleaseDecisionSerializer(many=True, source="decisions.all")

    def get_stable(self, plan: Any) -> str:
        return f"{plan.stable.adapter.name}@{plan.stable.number}"

    def get_candidate(self, plan: Any) -> str:
        return f"{plan.candidate.adapter.name}@{plan.candidate.number}"


class ReleasePlanWriteSerializer(serializers.Serializer):
    candidate = serializers.RegexField(VERSION_REF_PATTERN, help_text="adapter@N, active")
    steps = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=100), min_length=2, max_length=10
    )
    min_step_seconds = serializers.IntegerField(required=False, min_value=0, max_value=7 * 86400)
    min_step_samples = serializers.IntegerField(required=False, min_value=10, max_value=1_000_000)
    sample_share = serializers.FloatField(required=False, min_value=0.001, max_value=1)
    alpha = serializers.FloatField(required=False, min_value=0.0001, max_value=0.49)
    margin = serializers.FloatField(required=False, min_value=0, max_value=0.99)
    keep_text_days = serializers.IntegerField(
        required=False, min_value=0, max_value=90, help_text="0: counts only"
    )


class ReleaseSampleSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    side = serializers.CharField(help_text="stable, candidate, or pair (a shadow pair)")
    passed = serializers.BooleanField(help_text="a pair: the candidate did not lose it")
    verdicts = serializers.JSONField()
    prompt = serializers.CharField()
    answer = serializers.CharField(help_text="a pair: the candidate's shadow answer")
    stable_answer = serializers.CharField(help_text="a pair: the stable's answer; else empty")
    judgement = serializers.JSONField(
        help_text="a pair: {outcome, candidate_first, candidate_second}; else {}"
    )
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()


class ReleaseActionSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")

"""Eval suites (immutable versions by sha256), a policy per adapter, runs and their cases."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from adapters.models import Adapter, AdapterVersion
from tenants.models import SLUG_VALIDATOR, Tenant

RATE = [MinValueValidator(0.0), MaxValueValidator(1.0)]


class EvalSuite(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="eval_suites")
    name = models.CharField(max_length=40, validators=[SLUG_VALIDATOR])
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="evalsuite_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.name}"


class EvalSuiteVersion(models.Model):
    """One uploaded file, never changed: its bytes as sent, their sha256 and the parsed cases.
    Runs name the version they used, so a new upload never changes what an old run means."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    suite = models.ForeignKey(EvalSuite, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveIntegerField()
    content = models.TextField(help_text="the JSON Lines file exactly as uploaded")
    cases = models.JSONField(help_text="the parsed cases, in file order")
    case_count = models.PositiveIntegerField()
    must_pass_count = models.PositiveIntegerField(default=0)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["suite_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["suite", "number"], name="evalsuiteversion_number"),
            models.UniqueConstraint(fields=["suite", "sha256"], name="evalsuiteversion_sha256"),
        ]

    def __str__(self) -> str:
        return f"{self.suite.name}@{self.number}"


class EvalPolicy(models.Model):
    """What an adapter's versions must meet before approval; None: that criterion is not set.
    Must-pass cases always count: a suite's must_pass flags are the tenant's own rule.

    The policy holds one suite *version*, chosen by an owner: maintainers upload suite versions
    (and the adapter's versions), so a newer upload becomes the gate's only when an owner moves
    the policy to it; the gate counts runs on this version only."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    adapter = models.OneToOneField(Adapter, on_delete=models.CASCADE, related_name="eval_policy")
    suite = models.ForeignKey(EvalSuite, on_delete=models.PROTECT, related_name="policies")
    suite_version = models.ForeignKey(
        EvalSuiteVersion, on_delete=models.PROTECT, related_name="policies"
    )
    suite_version_set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    suite_version_set_at = models.DateTimeField(default=timezone.now)
    min_pass_rate = models.FloatField(null=True, blank=True, validators=RATE)
    max_regression_points = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(100.0)]
    )
    min_pairwise_win_or_tie = models.FloatField(null=True, blank=True, validators=RATE)
    pairwise_ties_pass = models.BooleanField(
        default=False, help_text="whether a real tie (TIE in both orders) passes the judge"
    )
    judge = models.CharField(
        max_length=120, blank=True, default="", help_text="a model the tenant may call, or none"
    )
    rubric = models.TextField(blank=True, default="", max_length=2000)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"policy of adapter {self.adapter_id}"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


class EvalRun(models.Model):
    """One evaluation of a version against a suite version; what it names never changes."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    version = models.ForeignKey(AdapterVersion, on_delete=models.CASCADE, related_name="eval_runs")
    suite_version = models.ForeignKey(
        EvalSuiteVersion, on_delete=models.PROTECT, related_name="runs"
    )
    number = models.PositiveIntegerField()
    version_sha256 = models.CharField(max_length=64)
    suite_sha256 = models.CharField(max_length=64)
    base_model = models.CharField(max_length=100)
    baseline = models.CharField(max_length=160, help_text="what served the alias: name@N or base")
    engines = models.JSONField(default=list)
    policy = models.JSONField(default=dict, help_text="the policy as it was when the run started")
    status = models.CharField(
        max_length=10, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True
    )
    cases_total = models.PositiveIntegerField(default=0)
    cases_done = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict)
    verdict = models.JSONField(default=dict)
    error = models.TextField(blank=True, default="")
    # The Celery task that claimed the run (queued -> running): a redelivery of that task takes
    # it up again; any other task leaves it alone.
    claimed_by = models.CharField(max_length=64, blank=True, default="")
    # Set at the claim and every EVAL_RUN_HEARTBEAT_SECONDS by the task running it; a running run
    # whose mark is older than EVAL_RUN_CLAIM_STALE_SECONDS is queued again (its worker died).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["version_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["version", "number"], name="evalrun_number"),
        ]

    def __str__(self) -> str:
        return f"run {self.number} of version {self.version_id}"


class CaseSide(models.TextChoices):
    CANDIDATE = "candidate"
    BASELINE = "baseline"
    # The pairwise judge: its row's answer is the outcome for the candidate after both orders
    # (evals.scoring.pairwise.combine: "win", "tie", "split", "loss" or "unreadable").
    JUDGE = "judge"


class EvalCaseResult(models.Model):
    """One side's answer to one case: unique per run, case and side, so a resumed run never runs
    a finished case twice (the row is the proof it ran)."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    case_id = models.CharField(max_length=100)
    side = models.CharField(max_length=10, choices=CaseSide.choices)
    answer = models.TextField(blank=True, default="")
    verdicts = models.JSONField(default=dict, help_text="{scorer: {passed, why}}")
    error = models.TextField(blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField(default=0)
    engine = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "case_id", "side"], name="evalcase_once"),
        ]

    def __str__(self) -> str:
        return f"{self.case_id}/{self.side}"


class GateRefusal(models.Model):
    """An approval the gate refused: who asked, on which run. The override needs a reviewer
    other than the first one refused (and the uploader)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    version = models.ForeignKey(
        AdapterVersion, on_delete=models.CASCADE, related_name="eval_gate_refusals"
    )
    run = models.ForeignKey(EvalRun, on_delete=models.SET_NULL, null=True, related_name="+")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    verdict = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"gate refusal of version {self.version_id}"

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
    # Checks on live answers, which need no expected answer (evals.scoring.live_checks): what a
    # release plan's live-check guard scores the sampled answers of the stable and the candidate by.
    live_checks = models.JSONField(default=dict, blank=True)
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


# --- releases judged on live quality (evals/services/release_plans.py, docs/releases.md) ---


class PlanStatus(models.TextChoices):
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    ROLLED_BACK = "rolled_back"


PLAN_OPEN = (PlanStatus.RUNNING, PlanStatus.PAUSED)


class ReleasePlan(models.Model):
    """One release of a candidate version on an alias, through weighted steps (0: shadow,
    callers see only the stable), each held for a minimum time and sample and left only when its
    guards say so. `current_step` and `status` move only by a conditional update, so two workers
    looking at the same step take one decision between them."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    alias = models.ForeignKey(
        "adapters.Alias", on_delete=models.CASCADE, related_name="release_plans"
    )
    stable = models.ForeignKey(AdapterVersion, on_delete=models.PROTECT, related_name="+")
    candidate = models.ForeignKey(AdapterVersion, on_delete=models.PROTECT, related_name="+")
    steps = models.JSONField(help_text="the candidate's weight at each step, e.g. [0, 5, 25, 100]")
    min_step_seconds = models.PositiveIntegerField(default=300)
    min_step_samples = models.PositiveIntegerField(default=50)
    sample_share = models.FloatField(default=0.10, validators=RATE)
    alpha = models.FloatField(default=0.05)
    margin = models.FloatField(default=0.05)
    # Keep the sampled prompts and answers this many days for the tenant's eval reviewers
    # (ReleaseSample); 0: counts only, no text is written.
    keep_text_days = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(90)])
    status = models.CharField(
        max_length=12, choices=PlanStatus.choices, default=PlanStatus.RUNNING, db_index=True
    )
    current_step = models.PositiveIntegerField(default=0)
    step_started_at = models.DateTimeField(default=timezone.now)
    reason = models.TextField(blank=True, default="", help_text="why it ended")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["alias_id", "-id"]
        constraints = [
            # One open plan per alias: two would move the same weights.
            models.UniqueConstraint(
                fields=["alias"],
                condition=models.Q(status__in=["running", "paused"]),
                name="releaseplan_one_open_per_alias",
            )
        ]

    def __str__(self) -> str:
        return f"release plan {self.pk} of alias {self.alias_id}"


class ReleaseStep(models.Model):
    """One step of a plan: its weight, when it began and ended, the live checks' counts of the
    answers sampled while it ran (per side), its guards' last figures and how it ended."""

    plan = models.ForeignKey(ReleasePlan, on_delete=models.CASCADE, related_name="step_rows")
    index = models.PositiveIntegerField()
    weight = models.PositiveIntegerField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    stable_n = models.PositiveIntegerField(default=0)
    stable_passed = models.PositiveIntegerField(default=0)
    candidate_n = models.PositiveIntegerField(default=0)
    candidate_passed = models.PositiveIntegerField(default=0)
    guards = models.JSONField(default=dict, help_text="{guard: its verdict as last evaluated}")
    # A shadow step's pairs (evals.services.shadow_pairs): the judge's outcome for the candidate
    # after both orders (evals.scoring.pairwise.Outcome) -> how many, and the stable's sampled
    # requests not asked of the candidate, by why (no_room, budget, backlog, stale, error).
    pairs = models.JSONField(default=dict, blank=True, help_text="{outcome: count}")
    shadow_skipped = models.JSONField(default=dict, blank=True, help_text="{reason: count}")
    evaluated_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        ordering = ["plan_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "index"], name="releasestep_unique_index")
        ]

    def __str__(self) -> str:
        return f"step {self.index} ({self.weight}%) of plan {self.plan_id}"


class ReleaseDecision(models.Model):
    """A decision on a plan (automatic or a person's) with the numbers it was taken on. The
    controller's are unique per plan, step and kind: a second worker's try fails its claim
    before it gets here, and the constraint is the proof."""

    plan = models.ForeignKey(ReleasePlan, on_delete=models.CASCADE, related_name="decisions")
    step = models.PositiveIntegerField()
    action = models.CharField(max_length=16)  # advance, complete, rollback, pause, resume
    automatic = models.BooleanField(default=False)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    reason = models.TextField(blank=True, default="")
    numbers = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["plan_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["plan", "step", "action"],
                condition=models.Q(automatic=True),
                name="releasedecision_once_per_step",
            )
        ]

    def __str__(self) -> str:
        return f"{self.action} at step {self.step} of plan {self.plan_id}"


class ReleaseSample(models.Model):
    """A sampled live answer kept as text, for a plan that keeps text (keep_text_days), until
    `expires_at`, when the retention job deletes it (evals.services.live_samples). A shadow pair
    (side `pair`) keeps the candidate's shadow answer in `answer`, the stable's in
    `stable_answer` and the judge's verdicts in `judgement`."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    plan = models.ForeignKey(ReleasePlan, on_delete=models.CASCADE, related_name="samples")
    step = models.PositiveIntegerField()
    side = models.CharField(max_length=10)  # stable, candidate, or pair (a shadow pair)
    passed = models.BooleanField()
    verdicts = models.JSONField(default=dict, help_text="{check: {passed, why}}")
    prompt = models.TextField(blank=True, default="")
    answer = models.TextField(blank=True, default="")
    stable_answer = models.TextField(blank=True, default="")
    judgement = models.JSONField(
        default=dict, blank=True, help_text="a pair's {outcome, candidate_first, candidate_second}"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["plan_id", "id"]

    def __str__(self) -> str:
        return f"{self.side} sample at step {self.step} of plan {self.plan_id}"

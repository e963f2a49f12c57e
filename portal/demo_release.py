"""The demo's eval gate and release plan (`make run`, after portal.demo): acme/support@2 released
beside @1 and the alias `support-bot` releasing it through a plan judged on live answers, its
first step shadow pairs (the demo load asks the alias); then a suite `qa` and a gate with live
checks and a judge on acme/support, and acme/support@3 uploaded and validated, its eval run
waiting on the review page. Idempotent."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path

from django.contrib.auth import get_user_model

from adapters.access import AccessContext
from adapters.models import Adapter, AdapterVersion, Alias, VersionStatus
from adapters.services.aliases import alias_set
from adapters.services.uploads import IncomingFile, version_upload
from evals.models import EvalPolicy, EvalSuite, ReleasePlan
from evals.services.policies import policy_set
from evals.services.release_plans import plan_start
from evals.services.suites import suite_upload

User = get_user_model()
DEMO_ALIAS = "support-bot"
# What each later version of acme/support is uploaded from (the kit's samples).
LATER_VERSIONS = {2: "sample-r8-all", 3: "sample-r16"}
DEMO_SUITE = [
    {
        "id": "greet",
        "prompt": "Say hello to a customer.",
        "max_tokens": 16,
        "expect": {"not_contains": ["BEGIN PRIVATE KEY"]},
    },
    {
        "id": "refund",
        "prompt": "How do refunds work?",
        "max_tokens": 16,
        "expect": {"not_contains": ["BEGIN PRIVATE KEY"]},
    },
    {
        "id": "late",
        "prompt": "My parcel is late.",
        "max_tokens": 16,
        "expect": {"not_contains": ["BEGIN PRIVATE KEY"]},
    },
]
DEMO_LIVE_CHECKS = {"not_contains": ["BEGIN PRIVATE KEY"], "max_chars": 400}
# Small on purpose: the demo load sends a request every few seconds. The first step is shadow:
# no caller sees support@2 while its pairs with support@1's answers are judged.
DEMO_STEPS = [0, 10, 50, 100]
# The judge is the tiny base model, whose choices are random: a wide margin lets the demo's
# plan move on a few dozen pairs (and sampled answers) a step.
DEMO_MARGIN = 0.5


def _upload(adapter: Adapter, number: int, source: Path) -> AdapterVersion | None:
    found = adapter.versions.filter(number=number).first()
    if found is not None or adapter.versions.count() >= number:
        return found
    owner = AccessContext.for_user(User.objects.get(username="alice"))
    config = (source / "adapter_config.json").read_bytes()
    with open(source / "adapter_model.safetensors", "rb") as model:
        return version_upload(
            access=owner,
            adapter=adapter,
            config=IncomingFile(io.BytesIO(config), len(config)),
            model=IncomingFile(model, os.fstat(model.fileno()).st_size),
        )


def seed_demo_release(*, tiny_dir: Path, release: Callable[..., str]) -> list[str]:
    """What was seeded, in words (nothing when it all exists already). `release(number=N)` takes
    acme/support@N through the lifecycle (portal.demo.release_demo_adapter, passed down)."""
    done: list[str] = []
    adapter = Adapter.objects.filter(tenant__slug="acme", name="support").first()
    if adapter is None:
        return done
    tenant = adapter.tenant
    owner = AccessContext.for_user(User.objects.get(username="alice"))
    # support@2, released as @1 was, before the gate exists (the gate wants a run first).
    if _upload(adapter, 2, tiny_dir / "adapters" / LATER_VERSIONS[2]) is not None:
        second = adapter.versions.get(number=2)
        if (
            second.status != VersionStatus.ACTIVE
            and not EvalPolicy.objects.filter(adapter=adapter).exists()
        ):
            release(number=2)
    if not Alias.objects.filter(tenant=tenant, name=DEMO_ALIAS).exists():
        alias_set(
            access=owner,
            tenant=tenant,
            name=DEMO_ALIAS,
            targets=[{"version": "support@1", "weight": 100}],
        )
        done.append(f"alias acme/{DEMO_ALIAS} -> support@1")
    # The suite and the gate, with live checks the plan's guard judges.
    if not EvalSuite.objects.filter(tenant=tenant, name="qa").exists():
        raw = "".join(json.dumps(case) + "\n" for case in DEMO_SUITE).encode()
        suite_upload(access=owner, tenant=tenant, name="qa", raw=raw)
        done.append("suite acme/qa")
    if not EvalPolicy.objects.filter(adapter=adapter).exists():
        policy_set(
            access=owner,
            adapter=adapter,
            suite="qa",
            min_pass_rate=0.5,
            live_checks=DEMO_LIVE_CHECKS,
            judge=adapter.base_model.name,
        )
        done.append("eval gate on acme/support (suite qa, live checks, judge)")
    alias = Alias.objects.get(tenant=tenant, name=DEMO_ALIAS)
    released = adapter.versions.filter(number=2, status=VersionStatus.ACTIVE).exists()
    if released and not ReleasePlan.objects.filter(alias=alias).exists():
        plan = plan_start(
            access=owner,
            alias=alias,
            candidate="support@2",
            steps=DEMO_STEPS,
            min_step_seconds=120,
            min_step_samples=10,
            sample_share=1.0,
            margin=DEMO_MARGIN,
            keep_text_days=1,
        )
        done.append(
            f"release plan {plan.pk}: support@2 on acme/{DEMO_ALIAS}, steps shadow, 10, 50, 100 %"
        )
    # support@3 uploaded and validated: the gate starts its eval run; it waits for a reviewer.
    third = _upload(adapter, 3, tiny_dir / "adapters" / LATER_VERSIONS[3])
    if third is not None and third.status in (VersionStatus.UPLOADED, VersionStatus.VALIDATING):
        from adapters.services.validation import run_validation

        run_validation(version_id=third.pk)
        done.append("acme/support@3 validated: its eval run waits on the review page")
    return done

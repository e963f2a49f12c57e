"""The alias's release page: the newest plan as a timeline with each step's guards (estimate,
interval, samples so far) and its decisions; the pause, resume, advance and roll back buttons
for those who may change the alias's weights, refused to a viewer as the API refuses them; every
judgement and decision tells the tenant's live pages."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from core.events import tenant_group
from evals.models import ReleaseDecision
from tests.evals.test_release_plans import counts, start, tick, with_checks

pytestmark = pytest.mark.django_db
PAGE = "/t/acme/aliases/support-bot/release/"


def test_the_timeline_shows_each_steps_guards_and_the_decisions(acme):
    with_checks(acme)
    plan = start(acme, steps=(5, 50, 100))
    counts(plan, stable=(300, 300), candidate=(300, 300))
    assert tick(plan).decision == "advance"
    plan.refresh_from_db()
    counts(plan, stable=(40, 40), candidate=(12, 12))
    assert tick(plan).decision == "hold"
    html = acme.client("vera").get(PAGE).content.decode()
    assert 'data-testid="step-0" data-state="done"' in html
    assert 'data-testid="step-1" data-state="current"' in html
    assert 'data-testid="step-2" data-state="to-come"' in html
    assert "stable 300/300, candidate 300/300" in html and "stable 40/40, candidate 12/12" in html
    assert "0.000</td><td>[-0." in html  # step 0's estimate and its interval
    assert "12 samples on the smaller side, 20 needed" in html
    assert "every guard holds" in html and "release-controller" in html
    assert 'data-live-events="/ws/tenants/acme/events/"' in html
    assert 'data-testid="plan-actions"' not in html  # a viewer may not act


def test_who_may_change_the_weights_pauses_resumes_advances_and_rolls_back(acme):
    with_checks(acme)
    plan = start(acme, steps=(5, 50, 100))
    bob = acme.client("bob")
    page = bob.get(PAGE).content.decode()
    assert 'data-testid="plan-pause"' in page and 'data-testid="plan-resume"' not in page
    act = f"/t/acme/aliases/support-bot/release/{plan.pk}/"
    assert bob.post(act + "pause/", {"reason": "lunch"}).status_code == 302
    page = bob.get(PAGE).content.decode()
    assert 'data-testid="plan-resume"' in page and "Paused" in page
    assert bob.post(act + "resume/").status_code == 302
    assert bob.post(act + "advance/", {"reason": "fine"}).status_code == 302
    assert acme.client("vera").post(act + "rollback/").status_code == 403
    assert acme.client("charlie").post(act + "rollback/").status_code == 404
    assert bob.post(act + "rollback/", {"reason": "complaints"}).status_code == 302
    assert [
        (d.action, getattr(d.actor, "username", None), d.reason)
        for d in ReleaseDecision.objects.all()
    ] == [
        ("pause", "bob", "lunch"),
        ("resume", "bob", ""),
        ("advance", "bob", "fine"),
        ("rollback", "bob", "complaints"),
    ]
    # A finished plan offers no buttons; a second roll back says why it did nothing.
    assert 'data-testid="plan-actions"' not in bob.get(PAGE).content.decode()
    followed = bob.post(act + "rollback/", follow=True).content.decode()
    assert "is rolled_back; nothing to do" in followed


def test_each_judgement_and_decision_tells_the_tenants_live_pages(
    acme, django_capture_on_commit_callbacks
):
    with_checks(acme)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(tenant_group(acme.acme.id), channel)
    with django_capture_on_commit_callbacks(execute=True):
        plan = start(acme, steps=(5, 100))
        counts(plan, stable=(300, 300), candidate=(300, 300))
        tick(plan)
    event = {
        "kind": "release.plan",
        "alias": "support-bot",
        "plan": plan.pk,
        "version": "support@2",
    }
    kinds = [async_to_sync(layer.receive)(channel)["event"] for _ in range(3)]
    assert kinds == [event, event, event]  # the start, the judgement, the completion

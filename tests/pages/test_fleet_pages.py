"""The operators' fleet pages (engines, one engine and its actions, the alarm banner), the dashboard's
fleet parts and a version's "Where it runs". No engine: actions write desired state and enqueue a
converge pass after commit, which never runs in these non-transactional tests."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from adapters.access import AccessContext
from adapters.models import Adapter, AdapterVersion
from core.audit_models import AuditEvent
from tests.fixtures.shared_counts import forget_engine
from tests.pages.routes import FLEET_ENGINE, _fleet_engine
from tests.workers.fleet import servable_version
from workers import engine_slots
from workers.alarms import alarm_clear, alarm_raise
from workers.models import Engine, FleetAction, Residency
from workers.page_selectors.engines import placements_of
from workers.schedules import TASK_NAME, entry_kwargs
from workers.selectors import version_placement
from workers.services.operator import operator_act

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def engine(pages):
    _fleet_engine(pages)
    forget_engine(FLEET_ENGINE)
    yield Engine.objects.get(name=FLEET_ENGINE)
    forget_engine(FLEET_ENGINE)


def label(version):
    return f"{version.tenant.slug}/{version.adapter.name}@{version.number}"


def act(client, verb, version, **headers):
    url = reverse("fleet-version-act", kwargs={"engine": FLEET_ENGINE, "verb": verb})
    return client.post(url, {"version": label(version)}, **headers)


def engine_url(name=FLEET_ENGINE):
    return reverse("fleet-engine", kwargs={"engine": name})


def cells(html, engine_name):
    """The data-testid cells of one engine's row, as text without tags."""
    row = html.split(f'data-engine="{engine_name}"', 1)[1].split("</tr>", 1)[0]
    found = re.findall(r'data-testid="([a-z-]+)"[^>]*>(.*?)</td>', row, flags=re.S)
    return {key: re.sub(r"<[^>]+>", "", text).split() for key, text in found}


def three_rows(pages, engine):
    """v2 pinned in a GPU slot and staged; v1 in the CPU cache; globex's in a GPU slot, its node
    copy quarantined: hot 2, warm 1, staged 1 (the quarantined copy does not count), pins 1."""
    now = timezone.now()
    Residency.objects.create(
        engine=engine,
        version=pages.active,
        desired_state="pinned",
        observed_state="pinned",
        desired_reason="operator pin",
        staged_at=now,
        load_latency_ms=412.0,
    )
    Residency.objects.create(
        engine=engine,
        version=pages.validated,
        desired_state="registered",
        observed_state="resident_cpu",
        last_error="load failed once: timeout",
    )
    Residency.objects.create(
        engine=engine,
        version=pages.foreign,
        desired_state="absent",
        observed_state="resident_gpu",
        staged_at=now,
        quarantined_at=now,
        quarantine_reason="sha256 mismatch on adapter_model.safetensors",
    )


# --- engines list ---


def test_the_engines_list_counts_slots_per_tier_from_the_rows(pages, engine):
    other = Engine.objects.create(
        name="pages-2",
        base_model=pages.world.base,
        url="http://127.0.0.1:9",
        served_model_name="tiny",
        adapter_root="/srv",
        max_loras=2,
        max_cpu_loras=3,
        gpu_observed=True,
        state="draining",
    )
    three_rows(pages, engine)
    alarm_raise(engine=engine, kind="thrash", subject="", message="loads and evictions")
    response = pages.client("olga").get(reverse("fleet-engines"))
    assert response.status_code == 200
    html = response.content.decode()
    mine = cells(html, FLEET_ENGINE)
    # max_loras 4, max_cpu_loras 8 (defaults): pin capacity min(4, 8) - 1 = 3.
    assert mine["hot"] == ["2", "/", "4", "inferred"]
    assert mine["warm"] == ["1", "cache", "3", "/", "8"]
    assert mine["staged"] == ["1"] and mine["pins"] == ["1", "/", "3"]
    assert mine["gpu-source"] == ["inferred"] and mine["alarms"] == ["1", "open"]
    empty = cells(html, "pages-2")
    assert empty["hot"] == ["0", "/", "2"] and empty["pins"] == ["0", "/", "1"]
    assert empty["gpu-source"] == ["observed"] and empty["alarms"] == ["0"]
    assert f'href="{engine_url()}"' in html and f'href="{engine_url(other.name)}"' in html


def test_the_list_reads_a_constant_number_of_queries(pages, engine, django_assert_max_num_queries):
    three_rows(pages, engine)
    for i in range(5):
        Engine.objects.create(
            name=f"more-{i}", base_model=pages.world.base, url="http://x", adapter_root="/s"
        )
    client = pages.client("olga")
    client.get(reverse("fleet-engines"))  # session, groups: the same on every request
    with django_assert_max_num_queries(8):
        assert client.get(reverse("fleet-engines")).status_code == 200


# --- one engine ---


def test_the_engine_page_lists_residency_history_advice_and_warmups(pages, engine):
    three_rows(pages, engine)
    FleetAction.objects.create(
        engine=engine,
        version=pages.active,
        served_name=pages.active.served_name,
        kind="load",
        ok=False,
        error="engine said no",
        latency_ms=87.0,
        reason="operator pin",
    )
    crontab = CrontabSchedule.objects.create(minute="0", hour="8", day_of_week="mon-fri")
    entry = PeriodicTask.objects.create(
        name="warmup:acme/support:open",
        task=TASK_NAME,
        kwargs=entry_kwargs(pages.world.support.pk, "open"),
        crontab=crontab,
    )
    elsewhere = Adapter.objects.create(
        tenant=pages.world.acme, name="elsewhere", base_model=pages.world.base, pool="dedicated"
    )
    PeriodicTask.objects.create(
        name="warmup:acme/elsewhere:open",
        task=TASK_NAME,
        kwargs=entry_kwargs(elsewhere.pk, "open"),
        crontab=crontab,
    )
    response = pages.client("olga").get(engine_url())
    assert response.status_code == 200
    html = response.content.decode()
    rows = {r.label: r for r in response.context["residencies"]}
    assert {k: (r.tier, r.row.desired_state, r.row.observed_state) for k, r in rows.items()} == {
        "acme/support@2": ("hot", "pinned", "pinned"),
        # validated, not servable: whatever the engine holds, the tier says disabled
        "acme/support@1": ("disabled", "registered", "resident_cpu"),
        "globex/legal@1": ("disabled", "absent", "resident_gpu"),
    }
    for text in (
        "operator pin",
        "412 ms",
        "sha256 mismatch on adapter_model.safetensors",
        "load failed once: timeout",
        "engine said no",
        "87 ms",
    ):
        assert text in html, text
    # Buttons follow the desired state: the pinned row offers Unpin, not Pin or Warm.
    pinned_row = html.split('data-version="acme/support@2"', 1)[1].split("</tr>", 1)[0]
    assert ">Unpin<" in pinned_row and ">Pin<" not in pinned_row and ">Warm<" not in pinned_row
    # Advisor and the launch command built from the same advice, with --lora-modules.
    assert [r["flag"] for r in response.context["advice_rows"]] == [
        "--max-loras",
        "--max-cpu-loras",
        "--max-lora-rank",
    ]
    command = response.context["launch_command"]
    assert "--enable-lora" in command and "--lora-modules" in command
    assert pages.active.served_name in command  # desired (pinned)
    assert pages.foreign.served_name not in command  # desired absent: on its way out
    assert all(escape(reason) in html for reason in response.context["advice"]["reasons"])
    # Warm-up entries of this pool only, linked to their admin page.
    admin = reverse("admin:django_celery_beat_periodictask_change", args=[entry.pk])
    assert f'href="{admin}"' in html
    assert "warmup:acme/elsewhere:open" not in html


def test_the_engine_page_reads_the_same_number_of_queries_for_3_and_30_rows(
    pages, engine, tmp_path
):
    client = pages.client("olga")

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(engine_url()).status_code == 200
        return len(captured)

    three_rows(pages, engine)
    few = queries()
    for i in range(27):
        adapter = Adapter.objects.create(
            tenant=pages.world.acme, name=f"many-{i}", base_model=pages.world.base
        )
        version = servable_version(adapter, tmp_path, seed=100 + i)
        Residency.objects.create(engine=engine, version=version, observed_state="resident_cpu")
        FleetAction.objects.create(engine=engine, version=version, kind="load")
    assert queries() == few


def test_an_unknown_engine_is_not_found_for_operators_only(pages, engine):
    assert pages.client("olga").get(engine_url("nope")).status_code == 404
    assert pages.client("alice").get(engine_url("nope")).status_code == 403


# --- actions on a version ---


def test_pin_over_htmx_swaps_the_row_with_desired_pinned_and_is_audited(pages, engine):
    response = act(pages.client("olga"), "pin", pages.active, **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    row = Residency.objects.get(engine=engine, version=pages.active)
    assert html.lstrip().startswith(f'<tr id="residency-{row.pk}"')
    assert re.search(r'data-testid="desired">pinned<', html)
    assert row.desired_state == "pinned" and row.desired_reason == "operator pin"
    event = AuditEvent.objects.get(action="engine.pin")
    assert event.object_id == f"{FLEET_ENGINE}/{pages.active.served_name}"
    assert event.actor_label == "olga"
    assert ">Unpin<" in html and ">Pin<" not in html


def test_a_pin_refused_by_the_pin_budget_shows_the_message_and_changes_nothing(
    pages, engine, tmp_path
):
    Engine.objects.filter(pk=engine.pk).update(max_loras=2, max_cpu_loras=3)  # capacity 1
    pages.world.acme.quota_pinned_slots = 5
    pages.world.acme.save()
    second = servable_version(pages.world.support, tmp_path, seed=7)
    operator_act(
        engine=engine,
        version=pages.active,
        verb="pin",
        access=AccessContext.for_user(pages.world.users["olga"]),
    )
    Residency.objects.create(engine=engine, version=second, desired_state="registered")
    olga = pages.client("olga")  # logging in is audited: before the count
    events = AuditEvent.objects.count()

    response = act(olga, "pin", second, **HTMX)
    assert response.status_code == 409
    html = response.content.decode()
    assert "fleet.pin_budget" in html and "may hold 1 pin(s)" in html
    assert html.lstrip().startswith('<tr id="residency-')  # the row, with the refusal in it
    assert Residency.objects.get(engine=engine, version=second).desired_state == "registered"
    assert AuditEvent.objects.count() == events

    plain = act(olga, "pin", second)  # a plain form: the page with the error
    assert plain.status_code == 409 and b"fleet.pin_budget" in plain.content
    assert b"<h2>Residency</h2>" in plain.content
    assert Residency.objects.get(engine=engine, version=second).desired_state == "registered"


def test_unpin_warm_and_evict_through_the_page(pages, engine):
    olga = pages.client("olga")
    assert act(olga, "pin", pages.active).status_code == 302
    assert act(olga, "unpin", pages.active, **HTMX).status_code == 200
    assert Residency.objects.get(version=pages.active).desired_state == "registered"
    assert act(olga, "warm", pages.active, **HTMX).status_code == 200
    assert Residency.objects.get(version=pages.active).desired_state == "resident_gpu"
    done = act(olga, "evict", pages.active)
    assert done.status_code == 302 and done["Location"] == engine_url()
    assert Residency.objects.get(version=pages.active).desired_state == "absent"
    assert b"evict requested, desired absent" in olga.get(engine_url()).content
    actions = list(
        AuditEvent.objects.filter(
            action__in=["engine.pin", "engine.unpin", "engine.warm", "engine.evict"]
        )
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["engine.pin", "engine.unpin", "engine.warm", "engine.evict"]


def test_evict_refused_while_requests_are_in_flight(pages, engine):
    olga = pages.client("olga")
    assert act(olga, "warm", pages.active).status_code == 302
    assert engine_slots.slot_enter(FLEET_ENGINE, pages.active.served_name, max_loras=2)
    refused = act(olga, "evict", pages.active, **HTMX)
    assert refused.status_code == 409 and b"fleet.in_flight" in refused.content
    assert Residency.objects.get(version=pages.active).desired_state == "resident_gpu"


def test_pin_and_warm_by_name_and_bad_names(pages, engine):
    olga = pages.client("olga")
    page = olga.get(engine_url()).content.decode()
    assert 'placeholder="tenant/adapter@N"' in page
    assert reverse("fleet-version-act", kwargs={"engine": FLEET_ENGINE, "verb": "warm"}) in page
    assert act(olga, "warm", pages.active).status_code == 302
    url = reverse("fleet-version-act", kwargs={"engine": FLEET_ENGINE, "verb": "pin"})
    bad = olga.post(url, {"version": "../../etc"})
    assert bad.status_code == 409 and b"fleet.bad_version" in bad.content
    missing = olga.post(url, {"version": "acme/support@99"}, **HTMX)
    assert missing.status_code == 404 and b"version.not_found" in missing.content
    never = act(olga, "evict", pages.validated, **HTMX)  # no row on this engine: the error alone
    assert never.status_code == 409 and b"fleet.not_resident" in never.content
    unknown = reverse("fleet-version-act", kwargs={"engine": FLEET_ENGINE, "verb": "explode"})
    assert olga.post(unknown, {"version": label(pages.active)}).status_code == 404
    assert not Residency.objects.filter(version=pages.validated).exists()


# --- the engine's own actions ---


def test_drain_and_undrain(pages, engine):
    olga = pages.client("olga")
    drain = reverse("fleet-engine-state", kwargs={"engine": FLEET_ENGINE, "verb": "drain"})
    undrain = reverse("fleet-engine-state", kwargs={"engine": FLEET_ENGINE, "verb": "undrain"})
    response = olga.post(drain)
    assert response.status_code == 302 and response["Location"] == engine_url()
    assert Engine.objects.get(pk=engine.pk).state == "draining"
    page = olga.get(engine_url()).content.decode()
    assert ">Undrain<" in page and ">Drain<" not in page
    again = olga.post(drain)
    assert again.status_code == 409 and b"engine.bad_transition" in again.content
    assert olga.post(undrain).status_code == 302
    assert Engine.objects.get(pk=engine.pk).state == "warming"
    assert list(
        AuditEvent.objects.filter(action__in=["engine.drain", "engine.undrain"])
        .order_by("id")
        .values_list("action", "object_id")
    ) == [("engine.drain", FLEET_ENGINE), ("engine.undrain", FLEET_ENGINE)]


def test_reconcile_now_is_audited(pages, engine):
    url = reverse("fleet-engine-reconcile", kwargs={"engine": FLEET_ENGINE})
    assert pages.client("adam").post(url).status_code == 302
    assert AuditEvent.objects.get(action="engine.reconcile").actor_label == "adam"


# --- who may ---


@pytest.mark.parametrize("who", ["alice", "charlie"])
def test_tenant_owners_get_no_fleet_page_and_change_nothing(pages, engine, who):
    client = pages.client(who)
    assert client.get(reverse("fleet-engines")).status_code == 403
    assert client.get(engine_url()).status_code == 403
    assert act(client, "pin", pages.active, **HTMX).status_code == 403
    drain = reverse("fleet-engine-state", kwargs={"engine": FLEET_ENGINE, "verb": "drain"})
    assert client.post(drain).status_code == 403
    assert not Residency.objects.exists()
    assert Engine.objects.get(pk=engine.pk).state == "up"
    assert not AuditEvent.objects.filter(action__startswith="engine.").exists()


@pytest.mark.parametrize(
    ("who", "shown"), [("olga", True), ("adam", True), ("alice", False), ("rita", False)]
)
def test_the_fleet_link_and_the_banner_slot_are_for_operators(pages, who, shown):
    html = pages.client(who).get(reverse("dashboard")).content.decode()
    nav = html.split("<nav>", 1)[1].split("</nav>", 1)[0]
    assert (f'href="{reverse("fleet-engines")}"' in nav) is shown
    assert (f'hx-get="{reverse("fleet-alarm-banner")}"' in html) is shown


# --- the alarm banner ---


def test_the_banner_shows_an_open_alarm_and_goes_when_it_is_cleared(pages, engine):
    olga = pages.client("olga")
    banner = reverse("fleet-alarm-banner")
    assert b"alarm-banner" not in olga.get(banner).content
    alarm_raise(
        engine=engine,
        kind="quarantine",
        subject=pages.active.served_name,
        message="The node's copy failed verification.",
    )
    shown = olga.get(banner).content.decode()
    assert 'data-testid="alarm-banner"' in shown and "1 open alarm" in shown
    assert f'href="{engine_url()}#alarms"' in shown and "failed verification" in shown
    assert b"failed verification" in olga.get(engine_url()).content  # and on the engine page
    alarm_clear(engine=engine, kind="quarantine", subject=pages.active.served_name)
    assert b"alarm-banner" not in olga.get(banner).content
    assert pages.client("alice").get(banner).status_code == 403


# --- where versions run ---


def test_the_version_page_shows_where_it_runs_without_actions(pages, engine):
    Residency.objects.create(
        engine=engine,
        version=pages.active,
        desired_state="registered",
        observed_state="resident_cpu",
    )
    url = reverse(
        "version-detail",
        kwargs={"tenant": "acme", "adapter": "support", "number": pages.active.number},
    )
    response = pages.client("vera").get(url)
    assert response.status_code == 200
    assert response.context["placement"] == version_placement(pages.active)
    html = response.content.decode()
    table = html.split('data-testid="placement"', 1)[1].split("</table>", 1)[0]
    assert re.search(
        rf"<td>{FLEET_ENGINE}</td>\s*<td[^>]*>warm</td><td>registered</td><td>resident_cpu</td>",
        table,
    )
    assert "/fleet/" not in html  # members see the engine's name only
    admin_html = pages.client("adam").get(url).content.decode()
    assert f'href="{engine_url()}"' in admin_html


def test_the_dashboard_shows_a_members_active_versions_and_where_they_run(pages, engine):
    Residency.objects.create(
        engine=engine, version=pages.active, desired_state="pinned", observed_state="pinned"
    )
    html = pages.client("bob").get(reverse("dashboard")).content.decode()
    table = html.split('data-testid="member-placement"', 1)[1].split("</table>", 1)[0]
    assert 'data-version="acme/support@2"' in table
    assert re.search(
        rf'<span class="engine">{FLEET_ENGINE}</span> <span class="tier tier-hot">hot</span>', table
    )
    assert "acme/support@1" not in table  # validated, not active
    assert "globex" not in table
    assert 'data-testid="operator-engines"' not in html
    assert (
        'data-testid="member-placement"'
        not in pages.client("nora").get(reverse("dashboard")).content.decode()
    )


def test_the_dashboard_gives_operators_slots_and_a_link_per_engine(pages, engine):
    three_rows(pages, engine)
    html = pages.client("olga").get(reverse("dashboard")).content.decode()
    assert 'data-testid="operator-engines"' in html
    mine = cells(html, FLEET_ENGINE)
    assert mine["hot"][:3] == ["2", "/", "4"] and mine["pins"] == ["1", "/", "3"]
    assert f'href="{engine_url()}"' in html


def test_placements_of_many_versions_equal_version_placement(
    pages, engine, tmp_path, django_assert_max_num_queries
):
    small = Engine.objects.create(
        name="pages-small",
        base_model=pages.world.base,
        url="http://x",
        adapter_root="/s",
        max_lora_rank=8,
    )
    Engine.objects.create(
        name="pages-dedicated",
        base_model=pages.world.base,
        url="http://x",
        adapter_root="/s",
        pool="dedicated",
    )
    big = servable_version(pages.world.support, tmp_path, seed=8, rank=16)  # too big for `small`
    outside = Engine.objects.get(name="pages-dedicated")
    Residency.objects.create(engine=outside, version=big, observed_state="resident_cpu")  # leaving
    Residency.objects.create(
        engine=small,
        version=pages.active,
        desired_state="pinned",
        observed_state="pinned",
        staged_at=timezone.now() - timedelta(minutes=1),
    )
    ids = [pages.active.pk, big.pk, pages.validated.pk, pages.foreign.pk]
    loaded = AdapterVersion.objects.select_related("adapter__tenant", "tenant").in_bulk(ids)
    versions = [loaded[pk] for pk in ids]
    with django_assert_max_num_queries(2):
        got = placements_of(versions)
    assert got == {v.pk: version_placement(v) for v in versions}
    assert [p["engine"] for p in got[big.pk]] == [FLEET_ENGINE, "pages-dedicated"]


def test_the_engine_page_shows_the_slots_each_service_class_holds(pages, engine):
    """Service classes (docs/classes.md): the slots each class's requests hold on the engine,
    every replica's, from the admission's load hash, beside each class's plan."""
    from workers import shared_state
    from workers.redis_contract.keys import load_key

    shared_state.client().hset(
        load_key(FLEET_ENGINE), mapping={"live": 5, "class:gold": 4, "class:bronze": 1}
    )
    html = pages.client("olga").get(engine_url()).content.decode()
    rows = {
        name: re.sub(r"<[^>]+>", "|", row)
        for name, row in re.findall(r'data-testid="class-(\w+)">(.*?)</tr>', html, flags=re.S)
    }
    assert [c for c in rows] == ["gold", "silver", "bronze"]
    assert "|4||6||10000 ms||no|" in rows["gold"]
    assert "|0||3|" in rows["silver"]
    assert "|1||1||2000 ms||yes|" in rows["bronze"]

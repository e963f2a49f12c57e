"""Who may chat with what in the playground (adapters/access.py's playground_may_use), and the
picker and resolution built on it (gateway/playground_choices.py)."""

from __future__ import annotations

import pytest

from adapters.access import AccessContext
from core.errors import NotFound, PermissionDenied
from engine.sample_adapters import TINY_BASE_MODEL_NAME
from gateway.playground_choices import playground_choices, playground_offer, resolve_choice
from tests.gateway.playground_world import build_playground_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def pw(world):
    return build_playground_world(world)


def keys(pw, who: str, tenant=None) -> list[str]:
    access = AccessContext.for_user(pw.world.users[who])
    return [c.key for c in playground_choices(access=access, tenant=tenant or pw.world.acme)]


def test_it_offers_maintainers_and_owners_active_staged_and_base(pw):
    expected = ["other@1", "support@2", "support@1", f"base:{pw.world.base.name}"]
    assert keys(pw, "bob") == expected
    assert keys(pw, "alice") == expected


def test_it_offers_an_upload_grantee_the_granted_adapters_active_versions_only(pw):
    assert keys(pw, "nora") == ["support@1"]


@pytest.mark.parametrize("who", ["vera", "vic", "rita", "adam", "olga", "charlie"])
def test_it_offers_nothing_to_viewers_view_grantees_platform_roles_and_outsiders(pw, who):
    assert keys(pw, who) == []


def test_a_staged_version_is_for_members_with_the_playground_only(pw):
    acme = pw.world.acme
    may = {
        who: AccessContext.for_user(pw.world.users[who]).playground_may_use(acme, pw.staged)
        for who in ("alice", "bob", "vera", "nora", "vic", "rita", "adam")
    }
    assert may == {
        "alice": True,
        "bob": True,
        "vera": False,
        "nora": False,
        "vic": False,
        "rita": False,
        "adam": False,
    }


def test_another_tenants_version_is_never_usable_through_this_tenant(pw):
    access = AccessContext.for_user(pw.world.users["bob"])
    assert not access.playground_may_use(pw.world.acme, pw.foreign)


@pytest.mark.parametrize(
    ("who", "error"),
    [
        ("charlie", NotFound),
        ("olga", NotFound),
        ("vera", PermissionDenied),
        ("rita", PermissionDenied),
    ],
)
def test_entering_the_playground_is_refused(pw, who, error):
    with pytest.raises(error):
        playground_offer(user=pw.world.users[who], tenant_slug="acme")


def test_a_deactivated_user_is_refused(pw):
    bob = pw.world.users["bob"]
    bob.is_active = False
    bob.save()
    with pytest.raises(NotFound):
        playground_offer(user=bob, tenant_slug="acme")


def test_it_resolves_a_staged_version_to_the_gateways_own_target(pw):
    resolved = resolve_choice(user=pw.world.users["bob"], tenant_slug="acme", key="support@2")
    assert resolved.target is not None
    assert resolved.target.served_name == pw.staged.served_name
    assert resolved.route.targets == (resolved.target,)
    assert resolved.tenant_id == pw.world.acme.id


def test_it_resolves_the_base_model_without_a_target(pw):
    base = pw.world.base
    resolved = resolve_choice(
        user=pw.world.users["bob"], tenant_slug="acme", key=f"base:{base.name}"
    )
    assert resolved.target is None and resolved.route.base_model_id == base.pk


@pytest.mark.parametrize(
    ("who", "key"),
    [
        ("nora", "other@1"),  # beyond the grant
        ("nora", "support@2"),  # staged: members only
        ("nora", f"base:{TINY_BASE_MODEL_NAME}"),  # the base model: members only
        ("bob", "support@3"),  # validated: not servable
        ("bob", "legal@1"),  # globex's name does not exist in acme
        ("bob", "support@99"),
        ("bob", "support"),
        ("bob", ""),
    ],
)
def test_it_refuses_what_the_user_may_not_use(pw, who, key):
    with pytest.raises(NotFound) as caught:
        resolve_choice(user=pw.world.users[who], tenant_slug="acme", key=key)
    assert caught.value.code == "playground.not_found"


# --- the per-prompt check from the gateway's tables (table_choice) ---


def _table():
    from gateway.routes import build_table

    return build_table(generation=1)


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_the_tables_answer_a_members_active_version_without_the_database(
    pw, who, django_assert_num_queries
):
    from gateway.playground_choices import table_choice

    table, user = _table(), pw.world.users[who]
    with django_assert_num_queries(0):
        resolved = table_choice(table, user=user, tenant_slug="acme", key="support@1")
    assert resolved is not None
    from_db = resolve_choice(user=user, tenant_slug="acme", key="support@1")
    assert (resolved.key, resolved.tenant_id, resolved.route) == (
        from_db.key,
        from_db.tenant_id,
        from_db.route,
    )


@pytest.mark.parametrize(
    ("who", "key"),
    [
        ("bob", "support@2"),  # staged: not in the tables, the database decides
        ("bob", "support@3"),  # validated
        ("bob", "support"),  # a name, not a picker key
        ("bob", f"base:{TINY_BASE_MODEL_NAME}"),
        ("bob", "legal@1"),  # globex's
        ("vera", "support@1"),  # a viewer: no playground
        ("nora", "support@1"),  # a grantee: the database decides
        ("rita", "support@1"),  # a platform role without membership
    ],
)
def test_the_tables_leave_everything_else_to_the_database(pw, who, key):
    from gateway.playground_choices import table_choice

    assert table_choice(_table(), user=pw.world.users[who], tenant_slug="acme", key=key) is None


def test_a_deactivated_member_is_not_in_the_tables_and_their_change_announces_it(
    pw, django_capture_on_commit_callbacks, monkeypatch
):
    from gateway import invalidation
    from gateway.playground_choices import table_choice

    announced: list[str] = []
    bob = pw.world.users["bob"]
    monkeypatch.setattr(invalidation, "announce", announced.append)
    with django_capture_on_commit_callbacks(execute=True):
        bob.save(update_fields=["last_login"])  # a login's stamp: not a change of access
    assert announced == []
    bob.is_active = False
    with django_capture_on_commit_callbacks(execute=True):
        bob.save()
    # The gateway's replicas re-read their tables (API tokens included) on the change.
    assert announced == [invalidation.ROUTES_KEY]
    assert table_choice(_table(), user=bob, tenant_slug="acme", key="support@1") is None
    with pytest.raises(NotFound):
        resolve_choice(user=bob, tenant_slug="acme", key="support@1")

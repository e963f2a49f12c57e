"""Every model name resolves inside the caller's reach, or is not found.

Each name form (adapter, adapter@N, alias, the base model bare, as `tenant/name`, and under an
unknown slug) against each kind of caller (owner, maintainer, viewer, a member of two tenants,
another tenant's owner, a per-adapter grantee, a removed member, a user in no tenant), through the
gateway's ASGI app. No engine is up: a name that resolves ends at `engine_unavailable`, one
outside reach at `model_not_found`, so the two are told apart without an engine.
"""

from __future__ import annotations

import pytest

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from tenants.models import Membership
from tenants.services.tenancy import adapter_grant, membership_remove, membership_set
from tests.gateway.inprocess import PROMPT, code_of, get, gw_fixture, post, token_for  # noqa: F401
from tests.gateway.recording import version

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = (
    "support",
    "support@1",
    "support-bot",
    "tiny-llama",
    "acme/tiny-llama",
    "acme/support",
    "globex/tiny-llama",
    "globex/legal",
    "nosuch/tiny-llama",
)
ACME = {"support", "support@1", "support-bot", "tiny-llama", "acme/tiny-llama", "acme/support"}
GLOBEX = {"legal", "tiny-llama", "globex/tiny-llama", "globex/legal"}
# caller -> the names it reaches; every other name in NAMES is not found.
REACH = {
    "owner": ACME,
    "owner-bound": ACME,
    "maintainer": ACME,
    "viewer": set(),  # a viewer may not infer
    "other-tenant": GLOBEX,
    # In two tenants with no binding: a bare name is ambiguous, `tenant/name` is not.
    "two-tenants": {"acme/tiny-llama", "acme/support", "globex/tiny-llama", "globex/legal"},
    "grantee": set(),  # a grant on one adapter is no membership: no inference
    "removed-member": set(),
    "no-tenant": set(),
}


@pytest.fixture
def callers(world):
    alice, charlie = world.users["alice"], world.users["charlie"]
    version(world.support, 1)
    version(world.legal, 1)
    alias_set(
        access=AccessContext.for_user(alice),
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    adapter_grant(
        access=AccessContext.for_user(alice),
        adapter=world.support,
        username="nora",
        perms=["view_adapter", "change_adapter"],
    )
    from tests.factories import make_user

    gone = make_user("gone")
    both = make_user("both")
    Membership.objects.create(user=gone, tenant=world.acme, role="maintainer")
    Membership.objects.create(user=both, tenant=world.acme, role="maintainer")
    membership_set(
        access=AccessContext.for_user(charlie),
        tenant=world.globex,
        username="both",
        role="maintainer",
    )
    tokens = {
        "owner": token_for(alice),
        "owner-bound": token_for(alice, world.acme),
        "maintainer": token_for(world.users["bob"]),
        "viewer": token_for(world.users["vera"]),
        "other-tenant": token_for(charlie),
        "two-tenants": token_for(both),
        "grantee": token_for(world.users["nora"]),
        "removed-member": token_for(gone, world.acme),
        "no-tenant": token_for(make_user("nobody")),
    }
    membership_remove(
        access=AccessContext.for_user(alice),
        membership=Membership.objects.get(user=gone, tenant=world.acme),
    )
    return tokens


@pytest.mark.parametrize("caller", list(REACH))
async def test_each_name_form_resolves_only_inside_the_callers_reach(gw, callers, caller):
    answers = {}
    for name in NAMES:
        reply = await post(gw, callers[caller], {"model": name, "messages": PROMPT})
        answers[name] = (reply.status_code, code_of(reply))
    expected = {
        name: (503, "engine_unavailable") if name in REACH[caller] else (404, "model_not_found")
        for name in NAMES
    }
    assert answers == expected


@pytest.mark.parametrize("caller", ["viewer", "grantee", "removed-member", "no-tenant"])
async def test_a_caller_who_reaches_no_tenant_lists_no_model(gw, callers, caller):
    reply = await get(gw, callers[caller], "/v1/models")
    assert reply.status_code == 200 and reply.json()["data"] == []


async def test_a_member_lists_the_base_model_and_its_tenants_names_only(gw, callers):
    reply = await get(gw, callers["other-tenant"], "/v1/models")
    assert {m["id"] for m in reply.json()["data"]} == {"tiny-llama", "legal", "legal@1"}

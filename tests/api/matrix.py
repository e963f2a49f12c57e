"""The API permission matrix: every endpoint x every principal -> status and error code.

Each endpoint is one row, NetBox-style: its success status, the token scope it needs, the persona
who succeeds (the *actor*, whose tokens the token columns use) and one cell per role column:

    anon  no credentials               adm   adam, platform-admin
    own   alice, owner of acme          rev   rita, reviewer
    mnt   bob, maintainer of acme       opr   olga, operator
    vwr   vera, viewer of acme          oth   charlie, owner of globex (another tenant)
    gnt   gus, guardian grant on acme/support only, asking about acme/support
    gno   gus again, asking about acme/billing (no grant): not found
    nora  a user with no membership and no role
    bnd   the actor's token (needed scope) bound to globex, asking about acme
    su    sue, a superuser with no membership: exactly the adm column (DERIVED_COLUMNS), since a
          superuser is a platform admin and nothing more inside tenants (docs/security.md, 7)

The token columns are the same for every endpoint, so they are not written out (TOKEN_COLUMNS):
the actor's token holding only the needed scope succeeds (bound to acme on tenant routes); a token
of the actor lacking that scope gets 403 token.missing_scope; an expired or revoked token, 401.

Cells: `ok` (the endpoint's success status), `-` (not applicable) or a key of CELLS.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone

from adapters.access import SCOPE_IMPLIES, AccessContext
from tenants.models import TokenScope

API_PREFIX = "/api/v1/"
ROLE_COLUMNS = (
    "anon",
    "own",
    "mnt",
    "vwr",
    "adm",
    "rev",
    "opr",
    "oth",
    "gnt",
    "gno",
    "nora",
    "bnd",
)
TOKEN_COLUMNS = ("tok", "nos", "exp", "rvk")
SESSION_USERS = {
    "own": "alice",
    "mnt": "bob",
    "vwr": "vera",
    "adm": "adam",
    "rev": "rita",
    "opr": "olga",
    "oth": "charlie",
    "gnt": "gus",
    "gno": "gus",
    "nora": "nora",
    "su": "sue",
}
# A column that is not written out: it gets, cell for cell, the column it names.
DERIVED_COLUMNS = {"su": "adm"}

CELLS: dict[str, tuple[int, str]] = {
    "401": (401, "not_authenticated"),
    "403": (403, "permission.denied"),
    "403s": (403, "token.missing_scope"),
    "403b": (403, "token.tenant_bound"),
    "403r": (403, "approval.not_reviewer"),
    "403o": (403, "release.not_owner"),
    "403d": (403, "disable.not_allowed"),
    "404": (404, "not_found"),
    "404t": (404, "tenant.not_found"),
    "404a": (404, "adapter.not_found"),
    "404u": (404, "upload.not_found"),
    "403e": (403, "engine.location"),
    "403a": (403, "audit.not_allowed"),
    "403x": (403, "audit.export_not_allowed"),
    "403v": (403, "evidence.not_allowed"),
    "403c": (403, "cost.not_allowed"),
    "403g": (403, "eval_run.not_allowed"),
    "403ep": (403, "eval_policy.not_allowed"),
    "403br": (403, "budget_raise.not_owner"),
    "403p": (403, "price_card.not_allowed"),
    "403tc": (403, "budget.tenant_ceiling"),
}


@dataclass(frozen=True)
class Endpoint:
    method: str
    route: str  # under /api/v1/, with {placeholders}
    ok: int
    scope: str
    actor: str
    row: str
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None  # a dict, or a callable(state) -> dict for multipart uploads
    # the action a successful write appends to the audit log (or an export, a read, appends)
    audit: str | None = None
    then: Callable[[Any, Any], None] | None = None  # checks the state after a success
    multipart: bool = False
    s3: bool = False  # runs against the S3-compatible server (direct uploads need it)
    setup: Callable[[Any], None] | None = None  # prepares per-case state (e.g. a pending upload)
    # the actor's tokens unbound even on a tenant route: a platform action inside a tenant, which
    # a platform admin takes with platform powers (a token bound to the tenant has none)
    unbound: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.method, self.route)

    @property
    def cells(self) -> dict[str, str]:
        cells = self.row.split()
        if len(cells) != len(ROLE_COLUMNS):
            raise ValueError(
                f"{self.method} {self.route}: {len(cells)} cells for {len(ROLE_COLUMNS)} columns"
            )
        return dict(zip(ROLE_COLUMNS, cells, strict=True))

    def expected(self, column: str) -> tuple[int, str | None] | None:
        if column in TOKEN_COLUMNS:
            return {
                "tok": (self.ok, None),
                "nos": CELLS["403s"],
                "exp": CELLS["401"],
                "rvk": CELLS["401"],
            }[column]
        cell = self.cells[DERIVED_COLUMNS.get(column, column)]
        if cell == "-":
            return None
        return (self.ok, None) if cell == "ok" else CELLS[cell]


# --- effects of successful writes (the audit event is checked for every write) ---


def _engine_state(state: str) -> Callable[[Any], None]:
    def setup(_state: Any) -> None:
        from workers.models import Engine

        Engine.objects.filter(name="cpu-1").update(state=state)

    return setup


def _exists(model_path: str, **lookup: Any) -> Callable[[Any, Any], None]:
    def check(state: Any, response: Any) -> None:
        from django.apps import apps

        model = apps.get_model(model_path)
        assert model.objects.filter(**lookup).exists(), f"no {model_path} {lookup} after success"

    return check


def _gone(model_path: str, **lookup: Any) -> Callable[[Any, Any], None]:
    def check(state: Any, response: Any) -> None:
        from django.apps import apps

        assert not apps.get_model(model_path).objects.filter(**lookup).exists()

    return check


def _version_status(number: int, status: str) -> Callable[[Any, Any], None]:
    def check(state: Any, response: Any) -> None:
        version = state.world.support.versions.get(number=number)
        assert version.status == status and response.json()["status"] == status

    return check


def _token_revoked(state: Any, response: Any) -> None:
    state.bob_token.refresh_from_db()
    assert state.bob_token.revoked_at is not None


def _upload_body(state: Any) -> dict[str, Any]:
    return state.upload_files()


def _pending_upload(state: Any) -> None:
    state.start_direct_upload(put_parts=False)


def _uploaded_parts(state: Any) -> None:
    state.start_direct_upload(put_parts=True)


def _direct_start_body(state: Any) -> dict[str, Any]:
    return {"model_size": state.model_size, "config": state.config_text}


def _complete_body(state: Any) -> dict[str, Any]:
    return {"parts": state.direct_parts}


def _upload_gone(state: Any, response: Any) -> None:
    from adapters.models import DirectUpload

    assert not DirectUpload.objects.filter(public_id=state.direct_upload_id).exists()


def _alias_canary(state: Any) -> None:
    """support@3 released and support-bot a canary: support@1 90 / support@3 10 (revision 2)."""
    from adapters.services import aliases, lifecycle

    alice = state.world.users["alice"]
    lifecycle.version_release(
        version=state.world.support.versions.get(number=3), access=AccessContext.for_user(alice)
    )
    aliases.alias_set(
        access=AccessContext.for_user(alice),
        tenant=state.world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 90}, {"version": "support@3", "weight": 10}],
    )


def _alias_targets(expected: dict[str, int]) -> Callable[[Any, Any], None]:
    def check(state: Any, response: Any) -> None:
        from adapters.models import Alias

        alias = Alias.objects.get(tenant__slug="acme", name="support-bot")
        got = {
            f"{t.version.adapter.name}@{t.version.number}": t.weight for t in alias.targets.all()
        }
        assert got == expected and alias.revisions.count() == 3, (got, expected)
        assert {t["version"]: t["weight"] for t in response.json()["targets"]} == expected

    return check


def _new_key_body(state: Any) -> dict[str, Any]:
    return {"name": "ci-key", "public_key_pem": state.new_key_pem}


def _pending_raise(state: Any) -> None:
    """alice (an owner of acme) asks to raise acme's tenant budget (100000) to 200000 tokens."""
    from budgets.models import Budget
    from budgets.raises import raise_request_create

    state.raise_request_id = raise_request_create(
        access=AccessContext.for_user(state.world.users["alice"]),
        budget=Budget.objects.get(tenant__slug="acme", scope="tenant"),
        tokens=200_000,
        duration="window",
        reason="launch",
    ).pk


def _raise_status(expected: str) -> Callable[[Any, Any], None]:
    def check(state: Any, response: Any) -> None:
        from budgets.models import BudgetRaiseRequest

        found = BudgetRaiseRequest.objects.get(pk=state.raise_request_id)
        assert found.status == expected and response.json()["status"] == expected

    return check


# The matrix's identity provider (tests/api/test_permission_matrix.py sets it; never contacted).
SSO_PROVIDER = "corp"
SSO_PROVIDERS = [
    {
        "name": SSO_PROVIDER,
        "issuer": "https://idp.example.test",
        "client_id": "portal",
        "client_secret_env": "CORP_IDP_SECRET",
    }
]
SSO_MAPPING_ID = 90001


def _sso_mapping(state: Any) -> None:
    from tenants.sso.models import SsoMapping

    SsoMapping.objects.get_or_create(
        pk=SSO_MAPPING_ID,
        provider=SSO_PROVIDER,
        claim="groups",
        value="auditors",
        platform_role="auditor",
    )


def _sso_dry_run(state: Any, response: Any) -> None:
    assert response.json()["platform_roles"] == [] and response.json()["maps_nowhere"]


TINY = "tiny-llama"
E = Endpoint
# fmt: off
#            anon own  mnt  vwr  adm  rev  opr  oth  gnt  gno  nora bnd
PLATFORM_ADMIN = "401 403  403  403  ok   403  403  403  403  -    403  403b"
OPERATORS = "     401 403  403  403  ok   403  ok   403  403  -    403  403b"
EVERYONE = "      401 ok   ok   ok   ok   ok   ok   ok   ok   -    ok   ok"
TENANT_READ = "   401 ok   ok   ok   ok   ok   404t 404t 403  -    404t 404t"
MEMBER_ADMIN = "  401 ok   403  403  ok   403  404t 404t 403  -    404t 404t"
TENANT_WRITE = "  401 ok   ok   403  403  403  404t 404t 403  -    404t 404t"
ADAPTER_READ = "  401 ok   ok   ok   ok   ok   404t 404t ok   404a 404t 404t"
ADAPTER_WRITE = " 401 ok   ok   403  403  403  404t 404t ok   404a 404t 404t"
ADAPTER_GRANT = " 401 ok   403  403  ok   403  404t 404t 403  404a 404t 404t"
REVIEWERS = "     401 403r 403r 403r 403r ok   404t 404t 403r 404a 404t 404t"
OWNERS = "        401 ok   403  403  403  403  404t 404t 403  -    404t 404t"
UPLOADERS = "     401 ok   ok   403  403  403  404t 404t ok   404a 404t 404t"
UPLOAD_SEEN = "   401 ok   ok   403  403  403  404t 404t 404u 404a 404t 404t"
OWN_TOKEN = "     401 ok   ok   404  ok   404  404t 404t 403  -    404t 404t"
USAGE_OWNERS = "  401 ok   403  403  ok   403  404t 404t 403  -    404t 404t"
TENANT_CEILING = "401 403tc 403 403  ok   403  404t 404t 403  -    404t 404t"
FLEET_COST = "    401 403c 403c 403c ok   403c 403c 403c 403c -    403c 403c"
VER = "tenants/{tenant}/adapters/{adapter}/versions/"
# Reads that take data away in bulk, so each is audited like a change (and changes nothing else).
AUDITED_READS = frozenset({VER + "{number}/evidence/", "audit/export/"})
UPL = "tenants/{tenant}/adapters/{adapter}/uploads/"

ENDPOINTS: tuple[Endpoint, ...] = (
    # users (platform admins)
    E("GET", "users/", 200, "read", "adam", PLATFORM_ADMIN),
    E("POST", "users/", 201, "admin", "adam", PLATFORM_ADMIN,
      body={"username": "newbie", "password": "a-Long-enough-passphrase-42",
            "platform_roles": ["operator"]},
      audit="user.create", then=_exists("auth.User", username="newbie", groups__name="operator")),
    E("GET", "users/{username}/", 200, "read", "adam", PLATFORM_ADMIN, params={"username": "bob"}),
    # whoami: every signed-in principal, about itself only
    E("GET", "users/me/", 200, "read", "alice", EVERYONE),
    E("PATCH", "users/{username}/", 200, "admin", "adam", PLATFORM_ADMIN,
      params={"username": "nora"},
      body={"platform_roles": ["operator"]}, audit="user.platform_roles",
      then=_exists("auth.User", username="nora", groups__name="operator")),
    # single sign-on: providers (settings) and their mappings (platform admins)
    E("GET", "sso/providers/", 200, "read", "adam", PLATFORM_ADMIN),
    E("GET", "sso/providers/{name}/mappings/", 200, "read", "adam", PLATFORM_ADMIN,
      params={"name": SSO_PROVIDER}),
    E("POST", "sso/providers/{name}/mappings/", 201, "admin", "adam", PLATFORM_ADMIN,
      params={"name": SSO_PROVIDER},
      body={"claim": "groups", "value": "ml-team", "tenant": "acme", "role": "viewer"},
      audit="sso.mapping.create",
      then=_exists("tenants.SsoMapping", provider=SSO_PROVIDER, value="ml-team", role="viewer")),
    E("DELETE", "sso/providers/{name}/mappings/{mapping}/", 204, "admin", "adam",
      PLATFORM_ADMIN, params={"name": SSO_PROVIDER, "mapping": str(SSO_MAPPING_ID)},
      setup=_sso_mapping, audit="sso.mapping.delete",
      then=_gone("tenants.SsoMapping", pk=SSO_MAPPING_ID)),
    E("POST", "sso/providers/{name}/dry-run/", 200, "admin", "adam", PLATFORM_ADMIN,
      params={"name": SSO_PROVIDER}, body={"claims": {"sub": "x", "groups": ["auditors"]}},
      audit="sso.dry_run", then=_sso_dry_run),
    # tenants
    E("GET", "tenants/", 200, "read", "alice", EVERYONE),
    E("POST", "tenants/", 201, "admin", "adam", PLATFORM_ADMIN,
      body={"slug": "initech", "name": "Initech"},
      audit="tenant.create", then=_exists("tenants.Tenant", slug="initech")),
    E("GET", "tenants/{tenant}/", 200, "read", "alice",
      "401 ok   ok   ok   ok   ok   404  404  ok   -    404  404"),
    E("PATCH", "tenants/{tenant}/", 200, "admin", "adam", PLATFORM_ADMIN,
      body={"quota_adapters": 7},
      audit="tenant.update", then=_exists("tenants.Tenant", slug="acme", quota_adapters=7)),
    # members
    E("GET", "tenants/{tenant}/members/", 200, "read", "alice", TENANT_READ),
    E("POST", "tenants/{tenant}/members/", 201, "admin", "alice", MEMBER_ADMIN,
      body={"username": "nora", "role": "viewer"}, audit="membership.set",
      then=_exists("tenants.Membership", tenant__slug="acme", user__username="nora",
                   role="viewer")),
    E("GET", "tenants/{tenant}/members/{username}/", 200, "read", "alice", TENANT_READ,
      params={"username": "bob"}),
    E("PATCH", "tenants/{tenant}/members/{username}/", 200, "admin", "alice", MEMBER_ADMIN,
      params={"username": "bob"}, body={"role": "viewer"}, audit="membership.set",
      then=_exists("tenants.Membership", tenant__slug="acme", user__username="bob", role="viewer")),
    E("DELETE", "tenants/{tenant}/members/{username}/", 204, "admin", "alice", MEMBER_ADMIN,
      params={"username": "vera"}, audit="membership.remove",
      then=_gone("tenants.Membership", tenant__slug="acme", user__username="vera")),
    # tenant tokens: everyone who may view the tenant has their own; owners see all of them
    E("GET", "tenants/{tenant}/tokens/", 200, "read", "alice", TENANT_READ),
    E("POST", "tenants/{tenant}/tokens/", 201, "write", "alice", TENANT_READ,
      body={"scopes": ["read"], "name": "ci"}, audit="token.create",
      then=_exists("tenants.ApiToken", tenant__slug="acme", name="ci", scopes=["read"])),
    E("GET", "tenants/{tenant}/tokens/{prefix}/", 200, "read", "alice", OWN_TOKEN),
    # The token is bob's: alice (owner) revokes another member's token, which through a token
    # needs the admin scope (adapters/access.py require_token_revoke); bob revokes his own.
    E("DELETE", "tenants/{tenant}/tokens/{prefix}/", 204, "admin", "alice", OWN_TOKEN,
      audit="token.revoke", then=_token_revoked),
    # a lower service class for the token (acme is silver): who may revoke it may lower it
    E("PATCH", "tenants/{tenant}/tokens/{prefix}/", 200, "admin", "alice", OWN_TOKEN,
      body={"service_class": "bronze"}, audit="token.service_class",
      then=_exists("tenants.ApiToken", tenant__slug="acme", service_class="bronze")),
    # service classes as plans: everyone reads them, platform admins edit them
    E("GET", "service-classes/", 200, "read", "alice", EVERYONE),
    E("GET", "service-classes/{name}/", 200, "read", "alice", EVERYONE, params={"name": "gold"}),
    E("PATCH", "service-classes/{name}/", 200, "admin", "adam", PLATFORM_ADMIN,
      params={"name": "bronze"}, body={"weight": 2}, audit="service_class.update",
      then=_exists("tenants.ServiceClass", name="bronze", weight=2)),
    # adapters and per-adapter grants
    E("GET", "tenants/{tenant}/adapters/", 200, "read", "alice",
      "401 ok   ok   ok   ok   ok   404t 404t ok   -    404t 404t"),
    E("POST", "tenants/{tenant}/adapters/", 201, "write", "alice", TENANT_WRITE,
      body={"name": "fresh", "base_model": TINY}, audit="adapter.create",
      then=_exists("adapters.Adapter", tenant__slug="acme", name="fresh")),
    E("GET", "tenants/{tenant}/adapters/{adapter}/", 200, "read", "alice", ADAPTER_READ),
    E("PATCH", "tenants/{tenant}/adapters/{adapter}/", 200, "write", "alice", ADAPTER_WRITE,
      body={"description": "edited"}, audit="adapter.update",
      then=_exists("adapters.Adapter", name="support", description="edited")),
    E("POST", "tenants/{tenant}/adapters/{adapter}/grants/", 200, "admin", "alice", ADAPTER_GRANT,
      body={"username": "nora", "perms": ["view_adapter"]}, audit="adapter.grant",
      then=_exists("adapters.AdapterUserObjectPermission", user__username="nora",
                   content_object__name="support")),
    E("DELETE", "tenants/{tenant}/adapters/{adapter}/grants/{username}/", 204, "admin", "alice",
      ADAPTER_GRANT, params={"username": "gus"}, audit="adapter.revoke",
      then=_gone("adapters.AdapterUserObjectPermission", user__username="gus",
                 content_object__name="support")),
    # versions and their lifecycle (support@1 active, @2 validated, @3 staged; bob uploaded them)
    E("GET", VER, 200, "read", "alice", ADAPTER_READ),
    E("POST", VER, 201, "write", "alice", ADAPTER_WRITE, body=_upload_body, multipart=True,
      audit="version.upload",
      then=_version_status(4, "uploaded")),
    E("GET", VER + "{number}/", 200, "read", "alice", ADAPTER_READ, params={"number": "1"}),
    E("GET", VER + "{number}/residency/", 200, "read", "alice", ADAPTER_READ,
      params={"number": "1"}),
    # a version's compliance record: owners, platform admins (and auditors); an audited export
    E("GET", VER + "{number}/evidence/", 200, "read", "alice",
      "401 ok   403v 403v ok   403v 404t 404t 403v 404a 404t 404t", params={"number": "1"},
      audit="version.evidence_export"),
    E("GET", "evidence/key/", 200, "read", "alice", EVERYONE),
    E("POST", VER + "{number}/approve/", 200, "approve", "rita", REVIEWERS, params={"number": "2"},
      body={"comment": "looks right"}, audit="version.approve", then=_version_status(2, "staged")),
    E("POST", VER + "{number}/reject/", 200, "approve", "rita", REVIEWERS, params={"number": "2"},
      body={"reason": "rank too large"}, audit="version.reject",
      then=_version_status(2, "rejected")),
    E("POST", VER + "{number}/release/", 200, "approve", "alice",
      "401 ok   403o 403o 403o 403o 404t 404t 403o 404a 404t 404t", params={"number": "3"},
      audit="version.release", then=_version_status(3, "active")),
    E("POST", VER + "{number}/disable/", 200, "write", "alice",
      "401 ok   403d 403d 403d 403d 404t 404t 403d 404a 404t 404t", params={"number": "1"},
      body={"reason": "incident"}, audit="version.disable", then=_version_status(1, "disabled")),
    # direct-to-S3 uploads (bob starts one per case; only the starter completes, owners see all)
    E("POST", UPL, 201, "write", "bob", UPLOADERS, body=_direct_start_body, s3=True,
      audit="upload.start", then=_exists("adapters.DirectUpload", adapter__name="support")),
    E("GET", UPL, 200, "read", "bob", UPLOADERS),
    E("GET", UPL + "{upload}/", 200, "write", "bob", UPLOAD_SEEN, s3=True, setup=_pending_upload),
    E("POST", UPL + "{upload}/complete/", 201, "write", "bob",
      "401 404u ok   403  403  403  404t 404t 404u 404a 404t 404t", s3=True, setup=_uploaded_parts,
      body=_complete_body, audit="version.upload", then=_version_status(4, "uploaded")),
    E("DELETE", UPL + "{upload}/", 204, "write", "bob", UPLOAD_SEEN, s3=True, setup=_pending_upload,
      audit="upload.discard", then=_upload_gone),
    # signing keys and the signature policy (acme has release-key)
    E("GET", "tenants/{tenant}/signing-keys/", 200, "read", "alice", TENANT_READ),
    E("POST", "tenants/{tenant}/signing-keys/", 201, "admin", "alice", OWNERS, body=_new_key_body,
      audit="signing_key.add",
      then=_exists("tenants.SigningKey", tenant__slug="acme", name="ci-key")),
    E("GET", "tenants/{tenant}/signing-keys/{key}/", 200, "read", "alice", TENANT_READ),
    E("DELETE", "tenants/{tenant}/signing-keys/{key}/", 204, "admin", "alice", OWNERS,
      audit="signing_key.revoke",
      then=_exists("tenants.SigningKey", name="release-key", revoked_at__isnull=False)),
    E("GET", "tenants/{tenant}/signature-policy/", 200, "read", "alice", TENANT_READ),
    E("PUT", "tenants/{tenant}/signature-policy/", 200, "admin", "alice", OWNERS,
      body={"require_signatures": True}, audit="tenant.signature_policy",
      then=_exists("tenants.Tenant", slug="acme", require_signatures=True)),
    # notifications: members read them; owners say where they go (e-mail, webhooks)
    E("GET", "tenants/{tenant}/notifications/", 200, "read", "alice", TENANT_READ),
    # a member dismisses a notice for themselves (a change of their own view: the write scope)
    E("POST", "tenants/{tenant}/notifications/{notification}/dismiss/", 200, "write", "alice",
      TENANT_READ, audit="notice.dismiss",
      then=_exists("tenants.NoticeDismissal", notification__key="matrix-notice")),
    E("GET", "tenants/{tenant}/email-recipients/", 200, "read", "alice", OWNERS),
    E("POST", "tenants/{tenant}/email-recipients/", 201, "admin", "alice", OWNERS,
      body={"email": "pager@acme.test"}, audit="email_recipient.add",
      then=_exists("tenants.EmailRecipient", tenant__slug="acme", email="pager@acme.test")),
    E("DELETE", "tenants/{tenant}/email-recipients/{email}/", 204, "admin", "alice", OWNERS,
      audit="email_recipient.remove", then=_gone("tenants.EmailRecipient", email="ops@acme.test")),
    E("GET", "tenants/{tenant}/webhooks/", 200, "read", "alice", OWNERS),
    E("POST", "tenants/{tenant}/webhooks/", 201, "admin", "alice", OWNERS,
      body={"name": "pager", "url": "http://127.0.0.1:9/pager"}, audit="webhook.create",
      then=_exists("tenants.WebhookEndpoint", tenant__slug="acme", name="pager")),
    E("GET", "tenants/{tenant}/webhooks/{webhook}/", 200, "read", "alice", OWNERS),
    E("PATCH", "tenants/{tenant}/webhooks/{webhook}/", 200, "admin", "alice", OWNERS,
      body={"active": False}, audit="webhook.update",
      then=_exists("tenants.WebhookEndpoint", name="ops", active=False)),
    E("DELETE", "tenants/{tenant}/webhooks/{webhook}/", 204, "admin", "alice", OWNERS,
      audit="webhook.delete", then=_gone("tenants.WebhookEndpoint", name="ops")),
    E("GET", "tenants/{tenant}/webhooks/{webhook}/deliveries/", 200, "read", "alice", OWNERS),
    # raising a budget: owners ask, platform admins (not the requester) decide
    E("GET", "tenants/{tenant}/budgets/{budget}/raise-requests/", 200, "read", "alice",
      TENANT_READ),
    E("POST", "tenants/{tenant}/budgets/{budget}/raise-requests/", 201, "write", "alice",
      "401 ok   403br 403br 403br 403br 404t 404t 403br -    404t 404t",
      body={"tokens": 300_000, "duration": "permanent", "reason": "growth"},
      audit="budget_raise.request",
      then=_exists("budgets.BudgetRaiseRequest", tokens=300_000, status="pending")),
    E("GET", "budget-raise-requests/", 200, "read", "adam", PLATFORM_ADMIN),
    E("GET", "budget-raise-requests/{raise_request}/", 200, "read", "adam", PLATFORM_ADMIN,
      setup=_pending_raise),
    E("POST", "budget-raise-requests/{raise_request}/approve/", 200, "admin", "adam",
      PLATFORM_ADMIN, setup=_pending_raise, body={"comment": "ok"},
      audit="budget_raise.approve", then=_raise_status("approved")),
    E("POST", "budget-raise-requests/{raise_request}/reject/", 200, "admin", "adam",
      PLATFORM_ADMIN, setup=_pending_raise, body={"comment": "no"},
      audit="budget_raise.reject", then=_raise_status("rejected")),
    # aliases (support-bot -> support@1)
    E("GET", "tenants/{tenant}/aliases/", 200, "read", "alice", TENANT_READ),
    E("POST", "tenants/{tenant}/aliases/", 201, "write", "alice", TENANT_WRITE,
      body={"name": "canary", "targets": [{"version": "support@1", "weight": 100}]},
      audit="alias.set",
      then=_exists("adapters.Alias", tenant__slug="acme", name="canary")),
    E("GET", "tenants/{tenant}/aliases/{alias}/", 200, "read", "alice", TENANT_READ),
    E("PUT", "tenants/{tenant}/aliases/{alias}/", 200, "write", "alice", TENANT_WRITE,
      body={"targets": [{"version": "support@1", "weight": 100}]}, audit="alias.set",
      then=_exists("adapters.Alias", tenant__slug="acme", name="support-bot")),
    E("DELETE", "tenants/{tenant}/aliases/{alias}/", 204, "write", "alice", TENANT_WRITE,
      audit="alias.delete", then=_gone("adapters.Alias", name="support-bot")),
    # releases: support-bot made a canary (support@1 90 / support@3 10) before each case
    E("POST", "tenants/{tenant}/aliases/{alias}/promote/", 200, "write", "alice", TENANT_WRITE,
      setup=_alias_canary, body={"version": "support@3", "reason": "canary healthy"},
      audit="alias.promote", then=_alias_targets({"support@3": 100})),
    E("POST", "tenants/{tenant}/aliases/{alias}/rollback/", 200, "write", "alice", TENANT_WRITE,
      setup=_alias_canary, body={"reason": "error rate"}, audit="alias.rollback",
      then=_alias_targets({"support@1": 100})),
    E("GET", "tenants/{tenant}/aliases/{alias}/revisions/", 200, "read", "alice", TENANT_READ),
    # the platform catalogue, fleet, cross-tenant version list and audit
    E("GET", "base-models/", 200, "read", "alice", EVERYONE),
    E("POST", "base-models/", 201, "admin", "adam", PLATFORM_ADMIN,
      body=lambda state: {"name": "tiny-2", "source": "var/tiny/base",
                          "hf_config": state.hf_config},
      audit="base_model.register", then=_exists("adapters.BaseModel", name="tiny-2")),
    E("GET", "base-models/{name}/", 200, "read", "alice", EVERYONE),
    E("GET", "engines/", 200, "read", "olga", OPERATORS),
    # where an engine lives (its URL gets the engine's key): platform admins only
    E("POST", "engines/", 201, "admin", "adam",
      "401 403  403  403  ok   403  403e 403  403  -    403  403b",
      body={"name": "cpu-2", "base_model": TINY, "url": "http://127.0.0.1:8199",
            "served_model_name": TINY, "adapter_root": "/srv/adapters"},
      audit="engine.create", then=_exists("workers.Engine", name="cpu-2")),
    E("GET", "engines/{engine}/", 200, "read", "olga", OPERATORS),
    E("PATCH", "engines/{engine}/", 200, "admin", "olga", OPERATORS, body={"max_num_seqs": 7},
      audit="engine.update", then=_exists("workers.Engine", name="cpu-1", max_num_seqs=7)),
    E("GET", "engines/{engine}/residency/", 200, "read", "olga", OPERATORS),
    # operator actions on one version (support@1 is pinned on cpu-1, support@3 cached there)
    E("POST", "engines/{engine}/pin/", 202, "write", "olga", OPERATORS,
      body={"version": "acme/support@1"}, audit="engine.pin",
      then=_exists("workers.Residency", engine__name="cpu-1", desired_state="pinned")),
    E("POST", "engines/{engine}/unpin/", 202, "write", "olga", OPERATORS,
      body={"version": "acme/support@1"}, audit="engine.unpin",
      then=_exists("workers.Residency", version__number=1, desired_state="registered")),
    E("POST", "engines/{engine}/warm/", 202, "write", "olga", OPERATORS,
      body={"version": "acme/support@3"}, audit="engine.warm",
      then=_exists("workers.Residency", version__number=3, desired_state="resident_gpu")),
    E("POST", "engines/{engine}/evict/", 202, "write", "olga", OPERATORS,
      body={"version": "acme/support@3"}, audit="engine.evict",
      then=_exists("workers.Residency", version__number=3, desired_state="absent")),
    E("POST", "engines/{engine}/drain/", 200, "write", "olga", OPERATORS, audit="engine.drain",
      then=_exists("workers.Engine", name="cpu-1", state="draining")),
    E("POST", "engines/{engine}/undrain/", 200, "write", "olga", OPERATORS,
      setup=_engine_state("draining"), audit="engine.undrain",
      then=_exists("workers.Engine", name="cpu-1", state="warming")),
    E("POST", "engines/{engine}/reconcile/", 202, "write", "olga", OPERATORS,
      audit="engine.reconcile",
      then=_exists("portal.AuditEvent", action="engine.reconcile", object_id="cpu-1")),
    E("GET", "engines/{engine}/actions/", 200, "read", "olga", OPERATORS),
    E("GET", "engines/{engine}/alarms/", 200, "read", "olga", OPERATORS),
    E("GET", "engines/{engine}/advice/", 200, "read", "olga", OPERATORS),
    E("GET", "engines/{engine}/launch-config/", 200, "read", "olga", OPERATORS),
    E("GET", "versions/", 200, "read", "alice", EVERYONE),
    E("GET", "audit/", 200, "read", "alice",
      "401 ok   403a 403a ok   403a 403a ok   403a -    403a 403a"),
    E("GET", "audit/verify/", 200, "read", "adam", PLATFORM_ADMIN),
    E("GET", "audit/export/", 200, "read", "alice",
      "401 ok   403x 403x ok   403x 403x ok   403x -    403x 403x", audit="audit.export"),
    # gateway numbers: an adapter's time series (whoever views it), usage (owners, admins)
    E("GET", "tenants/{tenant}/adapters/{adapter}/metrics/", 200, "read", "alice", ADAPTER_READ),
    E("GET", "tenants/{tenant}/usage/", 200, "read", "alice", USAGE_OWNERS),
    E("GET", "usage/", 200, "read", "adam", PLATFORM_ADMIN),
    # the cost view: the fleet's for platform admins (and auditors); the price, admins set it
    E("GET", "cost/", 200, "read", "adam", FLEET_COST),
    E("GET", "cost/settings/", 200, "read", "adam", FLEET_COST),
    E("PUT", "cost/settings/", 200, "admin", "adam",
      "401 403c 403c 403c ok   403c 403c 403c 403c -    403c 403b",
      body={"price_per_engine_hour": "1.25"}, audit="cost.settings",
      then=_exists("gateway.CostSettings", price_per_engine_hour="1.25")),
    # budgets: members see them, owners (and platform admins) set them, but the tenant budget
    # only owners lower: creating, raising or removing it is a platform admin's (or a raise's)
    E("GET", "tenants/{tenant}/budgets/", 200, "read", "alice", TENANT_READ),
    E("POST", "tenants/{tenant}/budgets/", 201, "write", "alice", USAGE_OWNERS,
      body={"scope": "alias:support-bot", "tokens": 1000, "window": "day"},
      audit="budget.create",
      then=_exists("budgets.Budget", scope="alias:support-bot", window="day")),
    E("GET", "tenants/{tenant}/budgets/{budget}/", 200, "read", "alice", TENANT_READ),
    E("PUT", "tenants/{tenant}/budgets/{budget}/", 200, "write", "alice", USAGE_OWNERS,
      body={"scope": "tenant", "tokens": 5000, "window": "month"}, audit="budget.update",
      then=_exists("budgets.Budget", scope="tenant", tokens=5000, window="month")),
    E("PATCH", "tenants/{tenant}/budgets/{budget}/", 200, "write", "adam", TENANT_CEILING,
      body={"tokens": 200_000}, audit="budget.update", unbound=True,
      then=_exists("budgets.Budget", scope="tenant", tokens=200_000)),
    E("DELETE", "tenants/{tenant}/budgets/{budget}/", 204, "write", "adam", TENANT_CEILING,
      audit="budget.delete", unbound=True, then=_gone("budgets.Budget", scope="tenant")),
    E("GET", "price-cards/", 200, "read", "adam", PLATFORM_ADMIN),
    E("PUT", "price-cards/", 200, "admin", "adam",
      "401 403p 403p 403p ok   403p 403p 403p 403p -    403p 403b",
      body={"base_model": TINY, "prompt_weight": "2", "price_per_million": "0.5"},
      audit="price_card.set",
      then=_exists("budgets.PriceCard", base_model__name=TINY, prompt_weight="2")),
)

def _suite_body(state: Any) -> dict[str, Any]:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return {"name": "qa", "file": SimpleUploadedFile("qa.jsonl", b'{"id": "n", "prompt": "p"}\n')}


RUN = VER + "{number}/eval-runs/"
EVAL_ENDPOINTS: tuple[Endpoint, ...] = (
    # the eval gate (suite qa; a policy on support; a passing run 1 on support@2)
    E("GET", "tenants/{tenant}/eval-suites/", 200, "read", "alice", TENANT_READ),
    E("POST", "tenants/{tenant}/eval-suites/", 201, "write", "bob", TENANT_WRITE,
      body=_suite_body, multipart=True, audit="eval_suite.upload",
      then=_exists("evals.EvalSuiteVersion", suite__name="qa", number=2)),
    E("GET", "tenants/{tenant}/adapters/{adapter}/eval-policy/", 200, "read", "alice",
      ADAPTER_READ),
    E("PUT", "tenants/{tenant}/adapters/{adapter}/eval-policy/", 200, "write", "alice",
      "401 ok   403ep 403ep 403ep 403ep 404t 404t 403ep 404a 404t 404t",
      body={"suite": "qa", "min_pass_rate": 0.9}, audit="eval_policy.set",
      then=_exists("evals.EvalPolicy", adapter__name="support", min_pass_rate=0.9)),
    E("GET", RUN, 200, "read", "alice", ADAPTER_READ, params={"number": "2"}),
    E("POST", RUN, 201, "write", "bob",
      "401 ok   ok   403g 403g 403g 404t 404t ok   404a 404t 404t",
      params={"number": "2"}, body={},
      audit="eval_run.create",
      then=_exists("evals.EvalRun", version__adapter__name="support", number=2)),
    E("GET", RUN + "{run}/", 200, "read", "alice", ADAPTER_READ, params={"number": "2", "run": "1"}),
    E("GET", RUN + "{run}/cases/", 200, "read", "alice", ADAPTER_READ,
      params={"number": "2", "run": "1"}),
)
ENDPOINTS = ENDPOINTS + EVAL_ENDPOINTS


def _candidate_released(state: Any) -> None:
    """support@3 released: a candidate for a release plan on support-bot (support@1 alone)."""
    from adapters.services import lifecycle

    lifecycle.version_release(
        version=state.world.support.versions.get(number=3),
        access=AccessContext.for_user(state.world.users["alice"]),
    )


def _plan_running(state: Any) -> None:
    """A release plan on support-bot: support@3 at 10 %, then 100 %."""
    from adapters.models import Alias
    from evals.services.release_plans import plan_start

    _candidate_released(state)
    plan_start(
        access=AccessContext.for_user(state.world.users["alice"]),
        alias=Alias.objects.get(tenant__slug="acme", name="support-bot"),
        candidate="support@3",
        steps=[10, 100],
    )


def _plan_paused(state: Any) -> None:
    from evals.models import ReleasePlan

    _plan_running(state)
    ReleasePlan.objects.update(status="paused")


def _plan_status(status: str) -> Callable[[Any, Any], None]:
    def check(state: Any, response: Any) -> None:
        from evals.models import ReleasePlan

        assert ReleasePlan.objects.get().status == status == response.json()["status"]

    return check


REL = "tenants/{tenant}/aliases/{alias}/releases/"
RELEASE_ENDPOINTS: tuple[Endpoint, ...] = (
    # release plans on the alias support-bot (support@1 alone; support@3 released as candidate)
    E("GET", REL, 200, "read", "alice", TENANT_READ, setup=_plan_running),
    E("POST", REL, 201, "write", "alice", TENANT_WRITE, setup=_candidate_released,
      body={"candidate": "support@3", "steps": [10, 100]}, audit="release_plan.start",
      then=_exists("evals.ReleasePlan", candidate__number=3, status="running")),
    E("GET", REL + "{plan}/", 200, "read", "alice", TENANT_READ, setup=_plan_running),
    E("POST", REL + "{plan}/pause/", 200, "write", "alice", TENANT_WRITE, setup=_plan_running,
      body={"reason": "look"}, audit="release_plan.pause", then=_plan_status("paused")),
    E("POST", REL + "{plan}/resume/", 200, "write", "alice", TENANT_WRITE,
      setup=_plan_paused,
      body={}, audit="release_plan.resume", then=_plan_status("running")),
    E("POST", REL + "{plan}/advance/", 200, "write", "alice", TENANT_WRITE, setup=_plan_running,
      body={"reason": "by hand"}, audit="release_plan.complete",
      then=_plan_status("completed")),
    E("GET", REL + "{plan}/samples/", 200, "read", "alice", TENANT_WRITE, setup=_plan_running),
    E("POST", REL + "{plan}/rollback/", 200, "write", "alice", TENANT_WRITE, setup=_plan_running,
      body={"reason": "no"}, audit="release_plan.rollback", then=_plan_status("rolled_back")),
)
ENDPOINTS = ENDPOINTS + RELEASE_ENDPOINTS


# Which rows each principal sees in a list (the acme/globex world of State), by a stable key.
LIST_KEYS: dict[str, Callable[[dict[str, Any]], str]] = {
    "tenants/": lambda row: row["slug"],
    "tenants/{tenant}/adapters/": lambda row: row["name"],
    "versions/": lambda row: f"{row['tenant']}/{row['adapter']}@{row['number']}",
    "base-models/": lambda row: row["name"],
}
ACME_VERSIONS = {"acme/support@1", "acme/support@2", "acme/support@3", "acme/billing@1"}
ALL_VERSIONS = ACME_VERSIONS | {"globex/legal@1"}
LIST_VISIBILITY: dict[str, dict[str, set[str]]] = {
    "tenants/": {"own": {"acme"}, "vwr": {"acme"}, "adm": {"acme", "globex"},
                 "rev": {"acme", "globex"}, "opr": set(), "oth": {"globex"}, "gnt": {"acme"},
                 "nora": set(), "bnd": {"globex"}},
    "tenants/{tenant}/adapters/": {"own": {"support", "billing"}, "vwr": {"support", "billing"},
                                   "adm": {"support", "billing"}, "rev": {"support", "billing"},
                                   "gnt": {"support"}},
    "versions/": {"own": ACME_VERSIONS, "vwr": ACME_VERSIONS, "adm": ALL_VERSIONS,
                  "rev": ALL_VERSIONS, "opr": set(), "oth": {"globex/legal@1"},
                  "gnt": {"acme/support@1", "acme/support@2", "acme/support@3"}, "nora": set(),
                  "bnd": {"globex/legal@1"}},
    "base-models/": {"own": {TINY}, "oth": {TINY}, "nora": {TINY}},
}
for _route in LIST_VISIBILITY.values():
    if "adm" in _route:
        _route["su"] = _route["adm"]

# fmt: on


def endpoint_by_key() -> dict[tuple[str, str], Endpoint]:
    table: dict[tuple[str, str], Endpoint] = {}
    for endpoint in ENDPOINTS:
        if endpoint.key in table:
            raise ValueError(f"{endpoint.key} is declared twice")
        table[endpoint.key] = endpoint
    return table


def scopes_lacking(scope: str) -> list[str]:
    """Every scope that does not grant `scope`: the most a token can hold and still miss it."""
    return sorted(s for s in TokenScope.values if scope not in SCOPE_IMPLIES[s])


def is_tenant_route(route: str) -> bool:
    from tenants.api_base import TenantScopedViewSet

    view = resolve(API_PREFIX + fill(route, _SAMPLE_PARAMS)).func
    return issubclass(getattr(view, "cls", object), TenantScopedViewSet)


# --- the URL resolver's view of the API, for the meta-test ---

_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>")
_FORMAT_SUFFIX = re.compile(r"\\\.\(\?P<format>")
_SAMPLE_PARAMS = {
    "tenant": "acme",
    "adapter": "support",
    "number": "1",
    "username": "bob",
    "prefix": "abc",
    "alias": "a",
    "engine": "e",
    "name": "n",
    "key": "k",
    "upload": "0" * 32,
    "mapping": "1",
    "webhook": "w",
    "notification": "1",
    "email": "e@example.com",
    "budget": "1",
    "raise_request": "1",
    "run": "1",
    "plan": "1",
}
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def fill(route: str, params: dict[str, str]) -> str:
    return route.format(**{k: params.get(k, v) for k, v in _SAMPLE_PARAMS.items()})


def _walk(resolver: URLResolver, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry, prefix + str(entry.pattern))
        else:
            yield prefix + str(entry.pattern), entry


def _template(raw: str) -> str:
    text = _GROUP.sub(lambda m: "{" + (m.group(1) or m.group(2)) + "}", raw)
    return text.replace("^", "").replace("$", "").replace("\\.", ".")


def allowed_methods(pattern: URLPattern) -> set[str]:
    """The methods a route answers: a viewset's action map, or an APIView's handlers."""
    view = pattern.callback
    actions = getattr(view, "actions", None)
    if actions is not None:
        # DRF adds `head` to a viewset's action map at its first GET; HEAD mirrors GET.
        return {method.upper() for method in actions} & set(HTTP_METHODS)
    cls = getattr(view, "cls", None) or getattr(view, "view_class", None)
    if cls is None:
        raise ValueError(f"cannot tell the methods of {pattern}")
    return {m for m in HTTP_METHODS if hasattr(cls, m.lower())}


def api_routes(*, include_format_suffixes: bool = False) -> dict[tuple[str, str], Any]:
    """(method, route template under /api/v1/) -> view, for every route the resolver knows."""
    found: dict[tuple[str, str], Any] = {}
    for raw, pattern in _walk(get_resolver()):
        if not raw.startswith(API_PREFIX.lstrip("/")):
            continue
        if _FORMAT_SUFFIX.search(raw) and not include_format_suffixes:
            continue
        route = _template(raw[len(API_PREFIX) - 1 :])
        for method in allowed_methods(pattern):
            found[(method, route)] = pattern.callback
    return found


def expire(token: Any) -> None:
    type(token).objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

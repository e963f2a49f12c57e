"""Every page route, how to fill its URL, and who gets what.

`test_routes_meta` fails when the URL resolver has a page that is missing here. `expect` maps a
persona (tests/factories.py) to the status it must get: 404 for another tenant's objects, 403 for
a role without the right, 200 (or 302 after a POST) when allowed. Anonymous is always sent to login.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adapters.access import AccessContext
from tests.pages.builders import PagesWorld

Kwargs = Callable[[PagesWorld], dict[str, Any]]


def _none(pw: PagesWorld) -> dict[str, Any]:
    return {}


def _acme(pw: PagesWorld) -> dict[str, Any]:
    return {"tenant": "acme"}


def _support(pw: PagesWorld) -> dict[str, Any]:
    return {"tenant": "acme", "adapter": "support"}


def _validated(pw: PagesWorld) -> dict[str, Any]:
    return {"tenant": "acme", "adapter": "support", "number": pw.validated.number}


def _active(pw: PagesWorld) -> dict[str, Any]:
    return {"tenant": "acme", "adapter": "support", "number": pw.active.number}


def _sso_mapping(pw: PagesWorld) -> dict[str, Any]:
    from tenants.sso.models import SsoMapping

    mapping, _ = SsoMapping.objects.get_or_create(
        provider="pages-idp", claim="groups", value="auditors", platform_role="auditor"
    )
    return {"mapping_id": mapping.pk}


FLEET_ENGINE = "pages-1"


def _fleet_engine(pw: PagesWorld) -> dict[str, Any]:
    """An engine of the world's base model in the default pool (the pages world has none)."""
    from workers.models import Engine

    Engine.objects.get_or_create(
        name=FLEET_ENGINE,
        defaults={
            "base_model": pw.world.base,
            "url": "http://127.0.0.1:9",
            "served_model_name": "tiny",
            "adapter_root": "/srv/adapters",
            "state": "up",
        },
    )
    return {"engine": FLEET_ENGINE}


def _fleet_engine_none(pw: PagesWorld) -> dict[str, Any]:
    """No URL arguments, but an engine exists (for fleet-wide pages that list engines)."""
    _fleet_engine(pw)
    return {}


def _fleet_verb(verb: str) -> Kwargs:
    return lambda pw: {**_fleet_engine(pw), "verb": verb}


def _acme_token(pw: PagesWorld) -> dict[str, Any]:
    """A token bob holds, bound to acme: its owner may revoke it, and so may bob."""
    from tenants.services.tokens import token_issue

    issued = token_issue(
        access=AccessContext.for_user(pw.world.users["bob"]), scopes=["read"], tenant=pw.world.acme
    )
    return {"tenant": "acme", "prefix": issued.token.prefix}


def _alices_acme_token(pw: PagesWorld) -> dict[str, Any]:
    """A token alice holds, bound to acme (silver): she may lower its class."""
    from tenants.services.tokens import token_issue

    issued = token_issue(
        access=AccessContext.for_user(pw.world.users["alice"]),
        scopes=["read"],
        tenant=pw.world.acme,
    )
    return {"token_id": issued.token.pk}


def _acme_key(pw: PagesWorld) -> dict[str, Any]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from adapters.access import AccessContext
    from tenants.services.signing_keys import signing_key_add

    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    key = signing_key_add(
        access=AccessContext.for_user(pw.world.users["alice"]),
        tenant=pw.world.acme,
        name="release-key",
        public_key_pem=pem,
    )
    return {"tenant": "acme", "key": key.name}


def _acme_webhook(pw: PagesWorld) -> dict[str, Any]:
    from tenants.notifications.models import WebhookEndpoint

    WebhookEndpoint.objects.get_or_create(
        tenant=pw.world.acme,
        name="pages-hook",
        defaults={"url": "https://hooks.example.com/portal", "secret_sealed": "-"},
    )
    return {"tenant": "acme", "webhook": "pages-hook"}


def _acme_notice(pw: PagesWorld) -> dict[str, Any]:
    from tenants.notifications.models import Notification

    notice, _ = Notification.objects.get_or_create(
        tenant=pw.world.acme, key="pages-notice", defaults={"subject": "Told", "body": "-"}
    )
    return {"tenant": "acme", "notification": notice.pk}


def _acme_budget(pw: PagesWorld) -> dict[str, Any]:
    from budgets.models import Budget

    budget, _ = Budget.objects.get_or_create(
        tenant=pw.world.acme, scope="tenant", window="month", defaults={"tokens": 1000}
    )
    return {"tenant": "acme", "budget": budget.pk}


def _pending_raise(pw: PagesWorld) -> dict[str, Any]:
    """alice asks to raise acme's budget (a platform admin decides; alice may not)."""
    from adapters.access import AccessContext
    from budgets.models import Budget, BudgetRaiseRequest
    from budgets.raises import raise_request_create

    budget = Budget.objects.get(pk=_acme_budget(pw)["budget"])
    pending = BudgetRaiseRequest.objects.filter(budget=budget, status="pending").first()
    pending = pending or raise_request_create(
        access=AccessContext.for_user(pw.world.users["alice"]),
        budget=budget,
        tokens=2000,
        duration="window",
        reason="launch",
    )
    return {"raise_request": pending.pk}


# Operators and platform admins only; everyone else 403 before any lookup.
NOT_FLEET = {"alice": 403, "bob": 403, "vera": 403, "charlie": 403, "rita": 403, "nora": 403}
ACTIVE_LABEL = {"version": "acme/support@2"}


@dataclass(frozen=True)
class PageRoute:
    name: str
    kwargs: Kwargs
    method: str = "get"
    expect: dict[str, int] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.method}:{self.name}"


PAGE_ROUTES: list[PageRoute] = [
    PageRoute("dashboard", _none, expect={"nora": 200, "alice": 200}),
    PageRoute("tokens", _none, expect={"nora": 200, "alice": 200}),
    PageRoute(
        "tokens",
        _none,
        "post",
        expect={"nora": 200},
        data={"scopes": ["read"], "expires_in_days": "7"},
    ),
    PageRoute(
        "token-revoke",
        lambda pw: {"token_id": pw.token.token.pk},
        "post",
        expect={"bob": 404, "charlie": 404, "alice": 302},
    ),
    PageRoute(
        "token-class",
        _alices_acme_token,
        "post",
        data={"service_class": "bronze"},
        expect={"bob": 404, "charlie": 404, "alice": 302},
    ),
    PageRoute(
        "review-queue",
        _none,
        expect={"alice": 403, "nora": 403, "adam": 403, "olga": 403, "rita": 200},
    ),
    PageRoute(
        "review-approve",
        _validated,
        "post",
        expect={"charlie": 404, "nora": 404, "alice": 403, "vera": 403, "rob": 302},
    ),
    PageRoute(
        "review-reject",
        _validated,
        "post",
        data={"reason": "not ours"},
        expect={"charlie": 404, "nora": 404, "alice": 403, "bob": 403, "rob": 302},
    ),
    PageRoute(
        "audit",
        _none,
        expect={"bob": 403, "vera": 403, "nora": 403, "rita": 403, "alice": 200, "adam": 200},
    ),
    PageRoute("audit-verify", _none, expect={"alice": 403, "rita": 403, "nora": 403, "adam": 200}),
    PageRoute(
        "tenant-adapters", _acme, expect={"charlie": 404, "nora": 404, "vera": 200, "rita": 200}
    ),
    PageRoute("adapter-detail", _support, expect={"charlie": 404, "nora": 404, "vera": 200}),
    PageRoute("version-detail", _active, expect={"charlie": 404, "nora": 404, "vera": 200}),
    PageRoute(
        "version-evidence-page",
        _active,
        expect={
            "charlie": 404,
            "nora": 404,
            "vera": 403,
            "bob": 403,
            "rita": 403,
            "alice": 200,
            "adam": 200,
        },
    ),
    PageRoute(
        "version-upload",
        _support,
        expect={"charlie": 404, "nora": 404, "vera": 403, "rita": 403, "adam": 403, "bob": 200},
    ),
    PageRoute(
        "version-upload", _support, "post", expect={"charlie": 404, "vera": 403, "adam": 403}
    ),
    PageRoute(
        "version-release",
        _validated,
        "post",
        expect={"charlie": 404, "bob": 403, "vera": 403, "adam": 403},
    ),
    # Platform roles stay out of tenants: a platform admin (or superuser) joins first.
    PageRoute(
        "version-disable",
        _active,
        "post",
        expect={"charlie": 404, "nora": 404, "bob": 403, "vera": 403, "adam": 403, "alice": 302},
    ),
    PageRoute("tenant-aliases", _acme, expect={"charlie": 404, "nora": 404, "vera": 200}),
    PageRoute("tenant-evals", _acme, expect={"charlie": 404, "nora": 404, "vera": 200}),
    PageRoute(
        "tenant-evals",
        _acme,
        "post",
        data={"name": "qa"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 400},  # bob: no file chosen
    ),
    # Whoever may upload the adapter's versions; without a policy the run is refused with a
    # message on the version page (a redirect), as for any refusal but 403 and 404.
    PageRoute(
        "version-eval-run-start",
        _validated,
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 302},
    ),
    PageRoute(
        "tenant-eval-policy",
        _acme,
        "post",
        data={"adapter": "support", "suite": "none"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 404},
    ),
    # Maintainers and owners; a viewer or a platform role sees the tenant but has nothing to try.
    PageRoute(
        "tenant-playground",
        _acme,
        expect={
            "charlie": 404,
            "nora": 404,
            "olga": 404,
            "vera": 403,
            "rita": 403,
            "adam": 403,
            "bob": 200,
            "alice": 200,
        },
    ),
    PageRoute(
        "tenant-aliases",
        _acme,
        "post",
        data={"name": "x", "version_0": "support@2", "weight_0": "100"},
        expect={"charlie": 404, "vera": 403, "bob": 302},
    ),
    PageRoute(
        "alias-delete",
        lambda pw: {"tenant": "acme", "alias": pw.alias.name},
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 302},
    ),
    PageRoute("fleet-engines", _none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute("fleet-engine", _fleet_engine, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute("fleet-alarm-banner", _none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute(
        "fleet-version-act",
        _fleet_verb("pin"),
        "post",
        data=ACTIVE_LABEL,
        expect={**NOT_FLEET, "olga": 302, "adam": 302},
    ),
    PageRoute(
        "fleet-version-act",
        _fleet_verb("warm"),
        "post",
        data=ACTIVE_LABEL,
        expect={"alice": 403, "bob": 403, "olga": 302},
    ),
    # Refused by the service (not pinned / not on the engine): the operator reached it.
    PageRoute(
        "fleet-version-act",
        _fleet_verb("unpin"),
        "post",
        data=ACTIVE_LABEL,
        expect={"alice": 403, "charlie": 403, "olga": 409},
    ),
    PageRoute(
        "fleet-version-act",
        _fleet_verb("evict"),
        "post",
        data=ACTIVE_LABEL,
        expect={"alice": 403, "vera": 403, "olga": 409},
    ),
    PageRoute(
        "fleet-engine-state",
        _fleet_verb("drain"),
        "post",
        expect={**NOT_FLEET, "olga": 302, "adam": 302},
    ),
    PageRoute(
        "fleet-engine-state",
        _fleet_verb("undrain"),
        "post",
        expect={"alice": 403, "nora": 403, "olga": 409},
    ),
    PageRoute(
        "fleet-engine-reconcile",
        _fleet_engine,
        "post",
        expect={**NOT_FLEET, "olga": 302, "adam": 302},
    ),
    # --- a tenant's members, grants and tokens (adapters/pages/access.py) ---
    PageRoute(
        "tenant-members",
        _acme,
        expect={"charlie": 404, "nora": 404, "olga": 404, "vera": 200, "rita": 200, "adam": 200},
    ),
    PageRoute(
        "tenant-members",
        _acme,
        "post",
        data={"username": "nora", "role": "viewer"},
        expect={"charlie": 404, "vera": 403, "bob": 403, "rita": 403, "alice": 302, "adam": 302},
    ),
    PageRoute(
        "member-remove",
        lambda pw: {"tenant": "acme", "username": "vera"},
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    PageRoute(
        "grant-add",
        _acme,
        "post",
        data={"adapter": "support", "username": "nora", "perms": ["view_adapter"]},
        expect={"charlie": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    PageRoute(
        "grant-revoke",
        lambda pw: {"tenant": "acme", "adapter": "support", "username": "nora"},
        "post",
        expect={"charlie": 404, "nora": 404, "bob": 403, "alice": 302},
    ),
    PageRoute(
        "tenant-token-revoke",
        _acme_token,
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 404, "bob": 302, "alice": 302},
    ),
    # --- signing keys and the signature policy (tenants/pages/keys.py) ---
    PageRoute(
        "tenant-keys", _acme, expect={"charlie": 404, "nora": 404, "vera": 200, "alice": 200}
    ),
    PageRoute(
        "tenant-keys",
        _acme,
        "post",
        data={"name": "k1", "public_key_pem": "not a key"},
        expect={"charlie": 404, "vera": 403, "bob": 403, "alice": 400},
    ),
    PageRoute(
        "signing-key-revoke",
        _acme_key,
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    PageRoute(
        "signature-policy-set",
        _acme,
        "post",
        expect={"charlie": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    # --- notifications (tenants/notifications/pages.py): members read, owners manage ---
    PageRoute(
        "tenant-notifications",
        _acme,
        expect={"charlie": 404, "nora": 404, "vera": 200, "bob": 200, "alice": 200},
    ),
    PageRoute(
        "notice-dismiss",
        _acme_notice,
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 302, "bob": 302, "alice": 302},
    ),
    PageRoute(
        "email-recipient-add",
        _acme,
        "post",
        data={"email": "ops@acme.test"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    PageRoute(
        "email-recipient-remove",
        _acme,
        "post",
        data={"email": "nobody@acme.test"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 404},
    ),
    PageRoute(
        "webhook-add",
        _acme,
        "post",
        data={"name": "lab", "url": "http://127.0.0.1:9/hook"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 400},
    ),
    PageRoute(
        "webhook-active",
        _acme_webhook,
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    PageRoute(
        "webhook-delete",
        _acme_webhook,
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    # --- budgets (budgets/pages/budgets.py): members read, owners ask, platform admins decide ---
    PageRoute(
        "tenant-budgets",
        _acme,
        expect={"charlie": 404, "nora": 404, "vera": 200, "alice": 200, "adam": 200},
    ),
    PageRoute(
        "budget-raise-request-add",
        _acme_budget,
        "post",
        data={"tokens": "5000", "duration": "window", "reason": "launch"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "adam": 403, "alice": 302},
    ),
    PageRoute(
        "budget-set",
        _acme,
        "post",
        data={"scope": "alias:prod", "tokens": "100", "window": "day"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    PageRoute(
        "budget-edit",
        _acme_budget,
        "post",
        data={"tokens": "500"},  # a lowering (raising the tenant budget: an admin)
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 403, "alice": 302},
    ),
    PageRoute(
        "price-card-save",
        _none,
        "post",
        data={"base_model": "tiny-llama", "prompt_weight": "0.5"},
        expect={"alice": 403, "rita": 403, "olga": 403, "adam": 302},
    ),
    PageRoute(
        "platform-budgets", _none, expect={"alice": 403, "rita": 403, "olga": 403, "adam": 200}
    ),
    PageRoute(
        "budget-raise-request-decide",
        _pending_raise,
        "post",
        data={"decision": "reject", "comment": "not now"},
        expect={"alice": 403, "rita": 403, "olga": 403, "adam": 302},
    ),
    # --- usage (gateway/pages/usage.py): owners and platform admins ---
    PageRoute(
        "tenant-usage",
        _acme,
        expect={
            "charlie": 404,
            "nora": 404,
            "vera": 403,
            "bob": 403,
            "rita": 403,
            "alice": 200,
            "adam": 200,
        },
    ),
    PageRoute(
        "platform-usage", _none, expect={"alice": 403, "rita": 403, "olga": 403, "adam": 200}
    ),
    # --- cost (gateway/pages/cost.py): owners their share, platform admins (and auditors) all ---
    PageRoute(
        "tenant-cost",
        _acme,
        expect={
            "charlie": 404,
            "nora": 404,
            "vera": 403,
            "bob": 403,
            "rita": 403,
            "alice": 200,
            "adam": 200,
        },
    ),
    PageRoute("platform-cost", _none, expect={"alice": 403, "rita": 403, "olga": 403, "adam": 200}),
    PageRoute(
        "platform-cost-settings",
        _none,
        "post",
        expect={"alice": 403, "rita": 403, "olga": 403, "adam": 302},
        data={"price_per_engine_hour": "1.5", "currency": "USD", "dedicated_slots": "8"},
    ),
    # --- adapters: create on the tenant home, settings on the adapter page ---
    PageRoute(
        "adapter-create",
        _acme,
        "post",
        data={"name": "fresh", "base_model": "tiny-llama", "max_concurrent_requests": "4"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "adam": 403, "bob": 302, "alice": 302},
    ),
    PageRoute(
        "adapter-update",
        _support,
        "post",
        data={"description": "answers", "warmup_policy": "on_demand"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "adam": 403, "bob": 302},
    ),
    PageRoute(
        "adapter-update",
        _support,
        "post",
        data={"part": "platform", "slo_class": "gold", "pool": ""},
        expect={"alice": 403, "bob": 403, "adam": 302},
    ),
    # --- aliases: promote and roll back (adapters/pages/aliases.py) ---
    PageRoute(
        "alias-promote",
        lambda pw: {"tenant": "acme", "alias": pw.alias.name},
        "post",
        data={"version": "support@2"},
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 302, "alice": 302},
    ),
    # One revision only: refused by the service (nothing to roll back to), so bob reached it.
    PageRoute(
        "alias-rollback",
        lambda pw: {"tenant": "acme", "alias": pw.alias.name},
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 409},
    ),
    # --- an alias's release plan (evals/pages/releases.py) ---
    PageRoute(
        "alias-release",
        lambda pw: {"tenant": "acme", "alias": pw.alias.name},
        expect={"charlie": 404, "nora": 404, "vera": 200, "bob": 200},
    ),
    # No such plan: bob (who may act on the alias) reached the lookup.
    PageRoute(
        "alias-release-action",
        lambda pw: {"tenant": "acme", "alias": pw.alias.name, "plan": 999999, "action": "pause"},
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 404},
    ),
    # No such pending upload (direct uploads need an S3 store): bob reached the lookup.
    PageRoute(
        "direct-upload-abort",
        lambda pw: {"tenant": "acme", "adapter": "support", "upload": "0" * 32},
        "post",
        expect={"charlie": 404, "nora": 404, "vera": 403, "bob": 404},
    ),
    # --- the operators' fleet-wide pages (workers/pages/overview.py) ---
    PageRoute("fleet-pools", _none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute("fleet-residency", _none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute("fleet-schedules", _none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute("fleet-alarms", _none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    PageRoute("fleet-advice", _fleet_engine_none, expect={**NOT_FLEET, "olga": 200, "adam": 200}),
    # --- registering and re-configuring engines (workers/pages/engine_forms.py) ---
    PageRoute(
        "fleet-engine-new",
        _none,
        "post",
        data={
            "name": "pages-2",
            "base_model": "tiny-llama",
            "url": "http://127.0.0.1:9",
            "served_model_name": "tiny",
            "adapter_root": "/srv/adapters",
        },
        # Placing an engine is a platform admin's: an operator reaches it and is refused.
        expect={**NOT_FLEET, "olga": 403, "adam": 302},
    ),
    PageRoute(
        "fleet-engine-edit",
        _fleet_engine,
        "post",
        data={"max_num_seqs": "8", "required": "false"},
        expect={**NOT_FLEET, "olga": 302, "adam": 302},
    ),
    PageRoute(
        "fleet-engine-edit",
        _fleet_engine,
        "post",
        data={"url": "http://10.9.9.9:8000"},
        expect={"alice": 403, "olga": 403, "adam": 302},
    ),
    # --- platform admins (tenants/pages/platform.py, adapters/pages/base_models.py) ---
    PageRoute("platform-home", _none, expect={"alice": 403, "rita": 403, "olga": 403, "adam": 200}),
    PageRoute(
        "platform-home",
        _none,
        "post",
        data={"slug": "initech", "name": "Initech", "slo_class": "bronze"},
        expect={"alice": 403, "olga": 403, "adam": 302},
    ),
    PageRoute("platform-tenant", _acme, expect={"alice": 403, "rita": 403, "adam": 200}),
    PageRoute(
        "platform-tenant",
        _acme,
        "post",
        data={"name": "Acme Corp", "slo_class": "gold", "quota_adapters": "50"},
        expect={"alice": 403, "olga": 403, "adam": 302},
    ),
    PageRoute("platform-users", _none, expect={"alice": 403, "olga": 403, "adam": 200}),
    PageRoute("platform-classes", _none, expect={"alice": 403, "olga": 403, "adam": 200}),
    PageRoute(
        "platform-classes",
        _none,
        "post",
        data={"name": "bronze", "weight": "2", "max_queue_wait_ms": "1500", "sheddable": "true"},
        expect={"alice": 403, "olga": 403, "adam": 302},
    ),
    PageRoute(
        "platform-users",
        _none,
        "post",
        data={"username": "zed", "password": "a-long-and-unusual-passphrase-42"},
        expect={"alice": 403, "rita": 403, "adam": 302},
    ),
    PageRoute(
        "platform-user-roles",
        lambda pw: {"username": "nora"},
        "post",
        data={"platform_roles": ["reviewer"]},
        expect={"alice": 403, "olga": 403, "adam": 302},
    ),
    PageRoute(
        "platform-user-active",
        lambda pw: {"username": "nora"},
        "post",
        data={"active": "false"},
        expect={"alice": 403, "olga": 403, "rita": 403, "adam": 302},
    ),
    # --- single sign-on mappings (tenants/sso/pages): platform admins; no provider is set here ---
    PageRoute("platform-sso", _none, expect={"alice": 403, "rita": 403, "adam": 200}),
    PageRoute(
        "platform-sso",
        _none,
        "post",
        data={"provider": "nowhere", "claim": "groups", "value": "x", "platform_role": "reviewer"},
        expect={"alice": 403, "olga": 403, "adam": 404},
    ),
    PageRoute(
        "platform-sso-dry-run",
        _none,
        "post",
        data={"provider": "nowhere", "claims": "{}"},
        expect={"alice": 403, "rita": 403, "adam": 404},
    ),
    PageRoute(
        "platform-sso-mapping-delete",
        _sso_mapping,
        "post",
        expect={"alice": 403, "olga": 403, "adam": 302},
    ),
    PageRoute("platform-base-models", _none, expect={"alice": 403, "olga": 403, "adam": 200}),
    PageRoute(
        "platform-base-models",
        _none,
        "post",
        data={"name": "other-tiny", "source": "var/other", "hf_config": "{}"},
        expect={"alice": 403, "olga": 403, "adam": 400},
    ),
]

# Names on the resolver that are not pages of this matrix: auth views, health, the API's docs.
NOT_PAGES = {
    "healthz",
    "login",
    "logout",
    "api-schema",
    "api-docs",
    "metrics",
    # Single sign-on's protocol edges (tests/sso): before a session, or from the provider.
    "sso-start",
    "sso-callback",
    "sso-backchannel-logout",
    "sso-cli-providers",
    "sso-cli-token",
}

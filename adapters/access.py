"""Who may see and do what: one place for tenant scoping, roles, object grants and token limits.

It lives in `adapters` because that is the lowest layer that sees every model it decides on
(tenants, memberships, tokens, adapters and their grants; no fleet model), so adapters, workers,
gateway and portal import it. `tenants` sits below it: its own views and services reach it
through tenants/access_port.py, which AdaptersConfig.ready() connects (docs/architecture.md).

Every view, API endpoint and consumer asks an AccessContext; none of them filters by tenant on
its own. Objects outside the caller's reach are not found (404); objects in reach but beyond the
caller's role are forbidden (403).

Three rules shape everything below (docs/security.md, classes 6, 7 and 12):
- A grant is only a grant: a per-object grant on one adapter shows that adapter and nothing else
  of its tenant (no tenant-wide reads, no tenant-wide live events).
- Platform roles stay out of tenants: platform admins, reviewers and operators read across
  tenants where their job needs it, but act inside a tenant only through a membership (which a
  platform admin may give themselves: explicit and audited as `membership.set`). A superuser is a
  platform admin and nothing more: guardian's "a superuser has every object permission" is not used.
- Each decision (audit reach, the reviewer check, who may disable, who sees engines, which of a
  tenant's adapters a live socket may pass on) is made here once, for pages, API and sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db.models import Q, QuerySet
from guardian.shortcuts import get_objects_for_user

from adapters.models import Adapter, AdapterUserObjectPermission, VersionStatus
from core.errors import NotFound, PermissionDenied
from tenants.models import (
    ApiToken,
    Membership,
    PlatformRole,
    SloClass,
    Tenant,
    TenantRole,
    TokenScope,
)
from tenants.sso.selectors import person_emails

# What each tenant role may do with the tenant's adapters (guardian codenames on Adapter).
ROLE_ADAPTER_PERMS: dict[str, frozenset[str]] = {
    TenantRole.OWNER: frozenset(
        {
            "view_adapter",
            "add_adapter",
            "change_adapter",
            "delete_adapter",
            "upload_version",
            "release_version",
        }
    ),
    TenantRole.MAINTAINER: frozenset(
        {"view_adapter", "add_adapter", "change_adapter", "upload_version"}
    ),
    TenantRole.VIEWER: frozenset({"view_adapter"}),
}

# Tenant-level capabilities beyond adapters.
ROLE_TENANT_CAPS: dict[str, frozenset[str]] = {
    TenantRole.OWNER: frozenset(
        {
            "view",
            "manage_members",
            "manage_aliases",
            "create_adapter",
            "release",
            "use_playground",
            "manage_keys",
            "infer",
            "manage_evals",
            # e-mail recipients and webhooks: where the tenant's notifications go
            "manage_notifications",
        }
    ),
    TenantRole.MAINTAINER: frozenset(
        {"view", "manage_aliases", "create_adapter", "use_playground", "infer", "manage_evals"}
    ),
    TenantRole.VIEWER: frozenset({"view"}),
}

# A scope a token needs for each kind of action; `write` and `approve` include reading.
SCOPE_IMPLIES: dict[str, frozenset[str]] = {
    TokenScope.READ: frozenset({TokenScope.READ}),
    TokenScope.WRITE: frozenset({TokenScope.WRITE, TokenScope.READ}),
    TokenScope.APPROVE: frozenset({TokenScope.APPROVE, TokenScope.READ}),
    TokenScope.ADMIN: frozenset({TokenScope.ADMIN, TokenScope.READ, TokenScope.WRITE}),
    TokenScope.INFERENCE: frozenset({TokenScope.INFERENCE}),
}


def _allowed(require: Callable[..., object], *args: Any) -> bool:
    """A `require_...` check as a yes/no, for pages deciding what to offer."""
    try:
        require(*args)
    except PermissionDenied:
        return False
    return True


@dataclass
class AccessContext:
    user: Any
    token: ApiToken | None = None
    _role_cache: dict[int, str | None] = field(default_factory=dict, repr=False)

    @classmethod
    def for_user(cls, user: Any, token: ApiToken | None = None) -> AccessContext:
        return cls(user=user, token=token)

    @classmethod
    def with_memberships(
        cls, user: Any, memberships: dict[int, str], token: ApiToken | None = None
    ) -> AccessContext:
        """For callers that already read the user's roles (the gateway's tables, one query for
        every user): the rules below decide as usual, without reading memberships again."""
        access = cls(user=user, token=token)
        access.__dict__["memberships"] = memberships  # the cached_property's own slot
        return access

    @classmethod
    def current(cls, user: Any) -> AccessContext | None:
        """For a long-lived connection (a socket): the user as the database has it now, so a
        deactivated user, a revoked membership or grant count at once; None if inactive."""
        from django.contrib.auth import get_user_model

        if user is None or not getattr(user, "is_authenticated", False):
            return None
        fresh = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
        return None if fresh is None else cls(user=fresh)

    @classmethod
    def for_request(cls, request: Any) -> AccessContext:
        cached = getattr(request, "_access_context", None)
        if cached is None:
            auth = getattr(request, "auth", None)
            cached = cls(user=request.user, token=auth if isinstance(auth, ApiToken) else None)
            request._access_context = cached
        return cached

    # --- identity ---
    @property
    def is_authenticated(self) -> bool:
        return bool(getattr(self.user, "is_authenticated", False))

    @cached_property
    def platform_roles(self) -> frozenset[str]:
        if not self.is_authenticated:
            return frozenset()
        names = set(self.user.groups.values_list("name", flat=True)) & set(PlatformRole.values)
        if self.user.is_superuser:
            # Explicit: a superuser is a platform admin, with no tenant powers of its own.
            names.add(PlatformRole.PLATFORM_ADMIN)
        return frozenset(names)

    @property
    def is_platform_admin(self) -> bool:
        return PlatformRole.PLATFORM_ADMIN in self.platform_roles

    @property
    def is_reviewer(self) -> bool:
        return PlatformRole.REVIEWER in self.platform_roles

    @property
    def is_operator(self) -> bool:
        return bool({PlatformRole.OPERATOR, PlatformRole.PLATFORM_ADMIN} & self.platform_roles)

    @property
    def is_auditor(self) -> bool:
        return PlatformRole.AUDITOR in self.platform_roles

    @property
    def sees_engines(self) -> bool:
        """Engines, their state, residency and actions: operators and platform admins. Members
        see only the names of the engines their own versions are placed on (never their pages)."""
        return self.is_operator

    def require_reviewer(self, action: str) -> None:
        """The reviewer check: a platform reviewer, acting with the `approve` scope."""
        if not self.is_reviewer:
            raise PermissionDenied(
                "approval.not_reviewer", f"Only a platform reviewer may {action}."
            )
        self.require_scope(TokenScope.APPROVE)

    def require_review(self, version: Any, verb: str) -> None:
        """Who may approve or reject `version`: a reviewer (require_reviewer) who did not upload
        it (four eyes: approving one's own upload would make the review a formality), through
        this account or another of theirs (same e-mail, as a provider verified it: a person
        with a local and an SSO account, or accounts at two providers, is one person)."""
        self.require_reviewer(f"{verb} a version")
        if version.uploaded_by_id is not None and self._is_same_person(version.uploaded_by_id):
            raise PermissionDenied(
                "approval.four_eyes",
                f"You uploaded this version; another reviewer must {verb} it.",
            )

    @cached_property
    def _own_emails(self) -> set[str]:
        return person_emails(self.user.pk)

    def _is_same_person(self, user_id: int) -> bool:
        """This account, or another of the same person (tenants.sso.selectors.person_emails);
        each other account is read once per AccessContext (a review queue lists many)."""
        if user_id == self.user.pk:
            return True
        if not self._own_emails:
            return False
        others: dict[int, set[str]] = self.__dict__.setdefault("_emails_of", {})
        if user_id not in others:
            others[user_id] = person_emails(user_id)
        return bool(self._own_emails & others[user_id])

    def may_review(self, version: Any) -> bool:
        """What the version page offers: require_review, without the exception."""
        try:
            self.require_review(version, "approve")
        except PermissionDenied:
            return False
        return True

    @cached_property
    def memberships(self) -> dict[int, str]:
        if not self.is_authenticated:
            return {}
        return dict(Membership.objects.filter(user=self.user).values_list("tenant_id", "role"))

    # --- tokens ---
    def has_scope(self, scope: str) -> bool:
        """Session logins carry every scope their user has; tokens only what they were given."""
        if self.token is None:
            return scope != TokenScope.INFERENCE or self.is_authenticated
        granted: set[str] = set()
        for given in self.token.scopes:
            granted |= SCOPE_IMPLIES.get(given, frozenset())
        return scope in granted

    def require_scope(self, scope: str) -> None:
        if not self.has_scope(scope):
            raise PermissionDenied(
                "token.missing_scope",
                f"This token lacks the '{scope}' scope needed for this request.",
            )

    @property
    def bound_tenant_id(self) -> int | None:
        return self.token.tenant_id if self.token is not None else None

    def _in_token_reach(self, tenant_id: int) -> bool:
        return self.bound_tenant_id is None or self.bound_tenant_id == tenant_id

    def require_platform_role(self, *predicates: str) -> None:
        """A platform power: any of `predicates` (e.g. "is_operator"), used unbound. A token
        bound to one tenant is for that tenant's automation and never carries its user's
        platform powers (platform routes, cross-tenant usage, the whole audit)."""
        if not any(getattr(self, predicate) for predicate in predicates):
            raise PermissionDenied(
                "permission.denied", "Your platform role does not allow this action."
            )
        if self.bound_tenant_id is not None:
            raise PermissionDenied(
                "token.tenant_bound",
                "This token is bound to one tenant; platform actions need an unbound token.",
            )

    def require_platform_change(self, what: str, *, code: str) -> None:
        """Changes only a platform admin makes, acting with platform powers (an unbound token
        with the admin scope, or a session): where an engine lives, an adapter's pool or SLO
        class. They decide capacity, cost and where engine keys are sent, for every tenant."""
        if not self.is_platform_admin:
            raise PermissionDenied(
                code, f"Only a platform admin may set {what}. Ask a platform admin to change it."
            )
        if self.bound_tenant_id is not None:
            raise PermissionDenied(
                "token.tenant_bound",
                f"Setting {what} is a platform action; this token is bound to one tenant. "
                "Use an unbound token.",
            )
        self.require_scope(TokenScope.ADMIN)

    # --- tenants ---
    def sees_all_tenants(self) -> bool:
        return self.is_platform_admin or self.is_reviewer or self.is_auditor

    def visible_tenants(self) -> QuerySet[Tenant]:
        if not self.is_authenticated:
            return Tenant.objects.none()
        if self.sees_all_tenants():
            qs = Tenant.objects.all()
        else:
            granted = self._granted_adapter_tenant_ids()
            qs = Tenant.objects.filter(Q(id__in=list(self.memberships)) | Q(id__in=granted))
        if self.bound_tenant_id is not None:
            qs = qs.filter(id=self.bound_tenant_id)
        return qs

    def _granted_adapter_tenant_ids(self) -> QuerySet:
        return AdapterUserObjectPermission.objects.filter(
            user=self.user, permission__codename="view_adapter"
        ).values("content_object__tenant_id")

    def get_tenant(self, slug: str) -> Tenant:
        tenant = self.visible_tenants().filter(slug=slug).first()
        if tenant is None:
            raise NotFound("tenant.not_found", f"No tenant '{slug}' is visible to you.")
        return tenant

    def tenant_role(self, tenant: Tenant) -> str | None:
        if not self._in_token_reach(tenant.id):
            return None
        return self.memberships.get(tenant.id)

    @staticmethod
    def role_can(role: str | None, capability: str) -> bool:
        """What a tenant role gives by itself (no platform role, no token reach): for callers
        that hold a role from a table (the gateway's) and must not touch the database."""
        return role is not None and capability in ROLE_TENANT_CAPS.get(role, frozenset())

    def tenant_can(self, tenant: Tenant, capability: str) -> bool:
        if not self._in_token_reach(tenant.id):
            return False
        if self.role_can(self.tenant_role(tenant), capability):
            return True
        if capability == "view" and self.sees_all_tenants():
            return True
        # Platform admins run the platform, they do not act inside tenants (least privilege),
        # except for membership management when bootstrapping a tenant.
        return capability == "manage_members" and self.is_platform_admin

    def require_tenant(self, tenant: Tenant, capability: str) -> None:
        if not self.tenant_can(tenant, capability):
            raise PermissionDenied(
                "permission.denied",
                f"Your role in tenant '{tenant.slug}' does not allow '{capability}'.",
            )

    def sees_tenant_details(self, tenant: Tenant) -> bool:
        """Quotas, plan and the rest of a tenant row: members and cross-tenant platform roles.
        Someone who only holds a grant in it sees its slug and name, to address the adapter."""
        return self.tenant_can(tenant, "view")

    def tenants_with_details(self) -> QuerySet[Tenant]:
        """The visible tenants whose details (sees_tenant_details) the caller sees: what a list
        may be filtered on by a detail (a filter on SLO class must not reveal a grant's tenant's)."""
        qs = self.visible_tenants()
        return qs if self.sees_all_tenants() else qs.filter(id__in=list(self.memberships))

    # --- usage (billing data) ---
    def require_usage_reader(self, tenant: Tenant) -> None:
        """A tenant's usage: its owners, and platform admins with platform powers (a session or
        an unbound token); maintainers, viewers and grantees are refused."""
        if self.tenant_role(tenant) == TenantRole.OWNER:
            return
        if not self.is_platform_admin:
            raise PermissionDenied(
                "permission.denied", f"Usage of tenant '{tenant.slug}' is for its owners."
            )
        self.require_platform_role("is_platform_admin")

    def may_read_usage(self, tenant: Tenant) -> bool:
        return _allowed(self.require_usage_reader, tenant)

    # --- budgets ---
    def may_view_budgets(self, tenant: Tenant) -> bool:
        """A tenant's budgets and where they stand: its members and cross-tenant platform
        roles (whoever sees the tenant's details)."""
        return self.tenant_can(tenant, "view")

    def require_budget_change(self, tenant: Tenant) -> None:
        """Setting, editing or removing a tenant's budgets: its owners, and platform admins
        acting with platform powers (a session or an unbound token)."""
        if self.tenant_role(tenant) == TenantRole.OWNER:
            return
        if not self.is_platform_admin:
            raise PermissionDenied(
                "permission.denied", f"Budgets of tenant '{tenant.slug}' are set by its owners."
            )
        self.require_platform_role("is_platform_admin")

    def may_change_budgets(self, tenant: Tenant) -> bool:
        return _allowed(self.require_budget_change, tenant)

    def require_tenant_ceiling_change(self, tenant: Tenant) -> None:
        """Creating, raising or removing a tenant-scope budget (the ceiling on all the tenant
        spends): platform admins acting with platform powers. Its owners may lower it, and ask
        for more through a raise request that another person approves (four eyes); an owner who
        raised it directly would approve their own raise."""
        if not self.is_platform_admin:
            raise PermissionDenied(
                "budget.tenant_ceiling",
                f"Only a platform admin may create, raise or remove the tenant budget of "
                f"'{tenant.slug}'. Owners may lower it, or ask for a raise "
                "(POST .../budgets/{id}/raise-requests/) that a platform admin approves.",
            )
        self.require_platform_role("is_platform_admin")

    def may_change_tenant_ceiling(self, tenant: Tenant) -> bool:
        return _allowed(self.require_tenant_ceiling_change, tenant)

    def require_budget_raise_request(self, tenant: Tenant) -> None:
        """Asking to raise one of a tenant's budgets: its owners (a platform admin asks only as
        an owner, through a membership), acting with the `write` scope."""
        if self.tenant_role(tenant) != TenantRole.OWNER:
            raise PermissionDenied(
                "budget_raise.not_owner",
                f"Only an owner of tenant '{tenant.slug}' may ask to raise its budgets.",
            )
        self.require_scope(TokenScope.WRITE)

    def require_budget_raise_decision(self, raise_request: Any) -> None:
        """Approving or rejecting a raise: a platform admin with platform powers (a session or an
        unbound token with the admin scope) who did not ask for it, through this account or
        another of theirs (four eyes, as for a version's review)."""
        self.require_platform_change("budget raises", code="budget_raise.not_platform_admin")
        requester = raise_request.requested_by_id
        if requester is not None and self._is_same_person(requester):
            raise PermissionDenied(
                "budget_raise.four_eyes",
                "You asked for this raise; another platform admin must decide it.",
            )

    def may_decide_budget_raise(self, raise_request: Any) -> bool:
        return _allowed(self.require_budget_raise_decision, raise_request)

    def require_price_card_change(self) -> None:
        """Price cards (token weights and prices per base model) count against every tenant's
        budgets: platform admins set them."""
        self.require_platform_change("price cards", code="price_card.not_allowed")

    # --- audit ---
    def audit_tenant_ids(self) -> list[int] | None:
        """Tenants whose audit events the caller may read; None means every event (a platform
        admin not confined by a tenant-bound token)."""
        if (self.is_platform_admin or self.is_auditor) and self.bound_tenant_id is None:
            return None
        return sorted(
            tenant_id
            for tenant_id, role in self.memberships.items()
            if role == TenantRole.OWNER and self._in_token_reach(tenant_id)
        )

    def may_read_audit(self) -> bool:
        return self.audit_tenant_ids() != []

    def require_audit_reader(self) -> list[int] | None:
        reach = self.audit_tenant_ids()
        if reach == []:
            raise PermissionDenied(
                "audit.not_allowed", "Only platform admins and tenant owners may read the audit."
            )
        return reach

    def require_audit_export(self, tenant: Tenant | None) -> list[int] | None:
        """Exporting the audit log (a whole range, offline): a tenant's owners export their
        tenant's events; platform admins and auditors everything. Answers the tenant ids the
        export is confined to (None: every event); maintainers and viewers are refused (403)."""
        reach = self.audit_tenant_ids()
        if reach is None:
            return None if tenant is None else [tenant.id]
        if tenant is None and len(reach) == 1:
            return reach
        if tenant is None or tenant.id not in reach:
            raise PermissionDenied(
                "audit.export_not_allowed",
                "Only a tenant's owners (for that tenant: pass tenant=<slug>), platform admins "
                "and auditors may export the audit log.",
            )
        return [tenant.id]

    def require_evidence_reader(self, tenant: Tenant) -> None:
        """A version's compliance record holds its audit trail and served totals (billing
        data): the tenant's owners, platform admins and auditors, as for the audit log."""
        reach = self.audit_tenant_ids()
        if reach is not None and tenant.id not in reach:
            raise PermissionDenied(
                "evidence.not_allowed",
                f"The compliance records of tenant '{tenant.slug}' are for its owners, "
                "platform admins and auditors.",
            )

    def may_read_evidence(self, tenant: Tenant) -> bool:
        return _allowed(self.require_evidence_reader, tenant)

    def may_read_cost(self, tenant: Tenant | None) -> bool:
        return _allowed(self.cost_tenant_reach, tenant)

    def cost_tenant_reach(self, tenant: Tenant | None) -> list[int] | None:
        """The cost view: the fleet's (every tenant, engine-hours, the price) for platform admins
        and auditors; one tenant's share for its owners (tenant=<slug>). None: everything."""
        if (self.is_platform_admin or self.is_auditor) and self.bound_tenant_id is None:
            return None if tenant is None else [tenant.id]
        if tenant is not None and self.tenant_role(tenant) == TenantRole.OWNER:
            return [tenant.id]
        raise PermissionDenied(
            "cost.not_allowed",
            "The fleet's cost is for platform admins and auditors; a tenant's owners see their "
            "tenant's share with tenant=<slug>.",
        )

    def may_verify_audit(self) -> bool:
        return self.is_platform_admin and self.bound_tenant_id is None

    # --- adapters ---
    def visible_adapters(self, tenant: Tenant) -> QuerySet:
        qs = Adapter.objects.filter(tenant=tenant)
        if not self._in_token_reach(tenant.id) or not self.is_authenticated:
            return qs.none()
        if self.tenant_role(tenant) is not None or self.sees_all_tenants():
            return qs
        return self._granted_only(qs)

    def _granted_only(self, qs: QuerySet) -> QuerySet:
        """The adapters of `qs` granted to the caller one by one: per-object grants only, never
        a model-wide permission (it would cross tenants)."""
        return get_objects_for_user(
            self.user,
            "adapters.view_adapter",
            klass=qs,
            accept_global_perms=False,
            with_superuser=False,
        )

    def adapter_reach(self, tenant: Tenant) -> frozenset[str] | None:
        """The names of the tenant's adapters the caller sees: None for all of them (members
        and platform roles that view tenants), else only those granted one by one (class 6:
        a grant is only a grant). What a live socket may pass on follows this."""
        if self.tenant_can(tenant, "view"):
            return None
        return frozenset(self.visible_adapters(tenant).values_list("name", flat=True))

    def granted_adapters(self, *, outside_tenants: list[int]) -> QuerySet:
        """Adapters seen through per-object grants only, in tenants the caller is not a member of."""
        qs = Adapter.objects.exclude(tenant_id__in=outside_tenants)
        if self.bound_tenant_id is not None:
            qs = qs.filter(tenant_id=self.bound_tenant_id)
        if not self.is_authenticated:
            return qs.none()
        return self._granted_only(qs)

    def adapter_can(self, adapter: Any, perm: str) -> bool:
        if not self._in_token_reach(adapter.tenant_id):
            return False
        role = self.tenant_role(adapter.tenant)
        if role is not None and perm in ROLE_ADAPTER_PERMS[role]:
            return True
        if perm == "view_adapter" and self.sees_all_tenants():
            return True
        return perm in self._granted_perms(adapter)

    def _granted_perms(self, adapter: Any) -> frozenset[str]:
        """The per-object grants on `adapter` (the user's own and their groups'), read from the
        grant tables: guardian's get_perms() answers "all of them" for a superuser, which would
        let platform powers act inside a tenant (class 7)."""
        from guardian.core import ObjectPermissionChecker

        if not self.is_authenticated:
            return frozenset()
        cache: dict[int, frozenset[str]] = self.__dict__.setdefault("_grants", {})
        if adapter.pk not in cache:
            checker = ObjectPermissionChecker(self.user)
            cache[adapter.pk] = frozenset(checker.get_user_perms(adapter)) | frozenset(
                checker.get_group_perms(adapter)
            )
        return cache[adapter.pk]

    def may_disable(self, adapter: Any) -> bool:
        """Who may disable a version: whoever may release it (a tenant owner). A platform admin
        joins the tenant first (class 7): disabling is acting inside it."""
        return self.adapter_can(adapter, "release_version")

    def require_disable(self, adapter: Any) -> None:
        if not self.may_disable(adapter):
            raise PermissionDenied(
                "disable.not_allowed", "Only an owner of the tenant may disable a version."
            )

    def may_send_upload(self, adapter: Any) -> bool:
        """Whether the caller may send an adapter-sized body to `adapter`'s upload endpoints: asked
        before the body is read (portal.body_limits), so it must hold whatever the view decides."""
        return self.has_scope(TokenScope.WRITE) and self.adapter_can(adapter, "upload_version")

    def may_start_eval_run(self, adapter: Any) -> bool:
        """Who may ask for an eval run of `adapter`'s versions (its engine time is billed to the
        tenant): whoever may upload them."""
        return self.adapter_can(adapter, "upload_version")

    def require_start_eval_run(self, adapter: Any) -> None:
        if not self.may_start_eval_run(adapter):
            raise PermissionDenied(
                "eval_run.not_allowed",
                f"Only those who may upload versions of '{adapter.name}' may start its eval runs.",
            )

    # --- the eval gate (evals/): who may set it, and who may override it ---
    def may_change_eval_policy(self, adapter: Any) -> bool:
        """Who may set `adapter`'s eval policy, and move it to a new suite version: whoever
        may release its versions (a tenant owner). Maintainers upload suite versions and the
        adapter's versions: the suite version that judges them is an owner's choice. A
        platform reviewer reads the gate, never sets it. The pages offer the policy's forms on
        this rule, and the API and the service refuse on it."""
        return self.has_scope(TokenScope.WRITE) and self.adapter_can(adapter, "release_version")

    def require_eval_policy_change(self, adapter: Any) -> None:
        if not self.may_change_eval_policy(adapter):
            raise PermissionDenied(
                "eval_policy.not_allowed",
                f"Only an owner of the tenant may set the eval policy of '{adapter.name}'.",
            )

    def is_same_person(self, user_id: int) -> bool:
        """This account, or another account of the same person (the four-eyes rule's reading:
        a shared e-mail, as a provider verified it)."""
        return self._is_same_person(user_id)

    def eval_gate_override_refusal(self, version: Any, refused_by: Any) -> PermissionDenied | None:
        """Why the caller may not override the eval gate on `version`, or None when they may: a
        reviewer who may approve it (require_review: not its uploader, in any account), and
        not the person the gate refused, in any account, at ANY of its refusals of this
        version (`refused_by`: the refused users' ids)."""
        try:
            self.require_review(version, "approve")
        except PermissionDenied as exc:
            return exc
        if any(self._is_same_person(user_id) for user_id in set(refused_by)):
            return PermissionDenied(
                "eval_gate.override_same_reviewer",
                "The gate refused your approval (through this account or another of yours); "
                "another reviewer must override it.",
            )
        return None

    def may_override_eval_gate(self, version: Any, refused_by: Any) -> bool:
        """What the version page offers: eval_gate_override_refusal, as a yes or no."""
        return self.eval_gate_override_refusal(version, refused_by) is None

    def require_eval_gate_override(self, version: Any, refused_by: Any) -> None:
        refusal = self.eval_gate_override_refusal(version, refused_by)
        if refusal is not None:
            raise refusal

    def require_adapter(self, adapter: Any, perm: str) -> None:
        if not self.adapter_can(adapter, perm):
            raise PermissionDenied(
                "permission.denied", f"You may not '{perm}' on adapter '{adapter.name}'."
            )

    # --- releases ---
    def release_role(self, adapter: Any) -> str | None:
        """Who the caller is to a release of `adapter`'s versions: "owner" (may start one),
        "reviewer" (may give a gold tenant's second approval, never start it) or None. A
        release acts for the tenant, so it needs the `approve` scope either way."""
        if not self.has_scope(TokenScope.APPROVE):
            return None
        if self.adapter_can(adapter, "release_version"):
            return "owner"
        if adapter.tenant.slo_class == SloClass.GOLD and self.is_reviewer:
            return "reviewer"
        return None

    # --- tokens ---
    def sees_tokens_of_others(self, tenant: Tenant) -> bool:
        """Whether the caller lists every token bound to `tenant` (those who manage its
        members) rather than only their own."""
        return self.tenant_can(tenant, "manage_members")

    def require_token_issue(self, tenant: Tenant | None) -> None:
        """A token for oneself: unbound, or bound to a tenant one sees (else 404, as any
        unseen tenant). What a token may mint is bounded by token_confine_to_caller."""
        if not self.is_authenticated:
            raise PermissionDenied("permission.denied", "Log in to create a token.")
        if tenant is not None and not self.visible_tenants().filter(pk=tenant.pk).exists():
            raise NotFound("tenant.not_found", f"No tenant '{tenant.slug}' is visible to you.")

    def require_token_revoke(self, token: ApiToken) -> None:
        """One's own tokens: always (a leaked token must be easy to kill), within the caller's
        token reach. Another member's token: those who manage the tenant's members, with the
        `admin` scope when acting through a token (class 9: members are an admin matter)."""
        own = token.user_id == self.user.pk
        if token.tenant_id is not None and not self._in_token_reach(token.tenant_id):
            raise NotFound("token.not_found", "You have no such token.")
        if own:
            return
        if token.tenant is None or not self.sees_tokens_of_others(token.tenant):
            raise NotFound("token.not_found", "You have no such token.")
        if not self.has_scope(TokenScope.ADMIN):
            raise PermissionDenied(
                "token.missing_scope",
                "Revoking another member's token needs a token with the 'admin' scope.",
            )

    # --- playground ---
    def playground_may_use(self, tenant: Tenant, version: Any | None = None) -> bool:
        """Whether this user may chat with `version` (None: the tenant's base models) in the
        playground. Members with the playground (maintainers, owners) may use the tenant's active
        versions, its base models, and staged versions, to try them before release; a grantee who
        may upload to one adapter may use that adapter's active versions only. Nobody else, and
        the gateway's API never serves a staged version at all."""
        if version is not None and version.tenant_id != tenant.id:
            return False
        if self.tenant_can(tenant, "use_playground"):
            return version is None or version.status in (
                VersionStatus.ACTIVE,
                VersionStatus.STAGED,
            )
        return (
            version is not None
            and version.status == VersionStatus.ACTIVE
            and self.adapter_can(version.adapter, "upload_version")
        )


class SystemAccess(AccessContext):
    """The portal's own trusted processes: management commands (run by whoever runs the
    server) and the demo's seeding. Platform-admin powers and nothing inside a tenant; audited
    with no user ("system"). Never built from a request, a token or a socket."""

    def __init__(self) -> None:
        super().__init__(user=None)

    @cached_property
    def platform_roles(self) -> frozenset[str]:
        return frozenset({PlatformRole.PLATFORM_ADMIN})

"""The gateway's in-process picture of who may call what, and where it runs.

Built from the database (and adapters.access for who may infer where), off the request path, and
rebuilt when a Redis generation counter moves (gateway/invalidation.py bumps it on every change
that matters). The request path only reads these frozen tables: no database row per request.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from adapters.access import AccessContext
from adapters.models import AdapterVersion, Alias, BaseModel, VersionStatus
from adapters.selectors import pool_of
from budgets.rules import BudgetRules, load_rules
from gateway.class_policy import DEFAULT_PLANS, ClassPlan
from gateway.request_schema import Plan
from tenants.models import ApiToken, Membership, ServiceClass, Tenant, TokenScope
from tenants.services.tokens import TOKEN_PREFIX
from workers.cache_policy import Tier
from workers.models import Engine, EngineState, Residency, ResidencyState
from workers.selectors import engine_key


@dataclass(frozen=True, slots=True)
class Target:
    """One adapter version a model name may send a request to."""

    served_name: str
    version_id: int
    tenant_id: int
    tenant: str
    adapter: str
    number: int
    pool: str
    base_model_id: int
    rank: int
    max_concurrent: int  # the adapter's max_concurrent_requests
    weight: int = 100
    # The alias target's own cap (a canary's), None when it has none; limits.py applies the
    # lower of the two.
    alias_max_concurrent: int | None = None

    @property
    def label(self) -> str:
        return f"{self.adapter}@{self.number}"


@dataclass(frozen=True, slots=True)
class Route:
    """What a model name means for one tenant: weighted targets, or the base model."""

    name: str
    targets: tuple[Target, ...] = ()
    base_model_id: int | None = None  # set for the base model itself
    alias: bool = False  # the name is an alias (its budgets apply)
    # An alias under a release plan: its id, and the share of its live answers sampled for the
    # plan's live checks (gateway.release_samples); 0: no plan runs.
    alias_id: int = 0
    sample_share: float = 0.0


@dataclass(frozen=True, slots=True)
class Caller:
    """An inference token as the gateway knows it."""

    prefix: str
    secret_hash: str
    user_id: int
    bound_tenant_id: int | None
    expires_at: float | None
    # Tenants whose names this token may call (its binding, and the user's roles there).
    tenant_ids: frozenset[int]
    token_id: int

    @property
    def home_tenant_id(self) -> int | None:
        """The tenant a bare model name means: the token's binding, or the caller's only tenant.
        None when the caller reaches no tenant, or several with no binding (names then need
        `tenant/`)."""
        if self.bound_tenant_id is not None:
            return self.bound_tenant_id if self.bound_tenant_id in self.tenant_ids else None
        if len(self.tenant_ids) == 1:
            return next(iter(self.tenant_ids))
        return None

    def valid(self, secret: str, now: float) -> bool:
        return token_valid(self.secret_hash, self.expires_at, secret, now)


@dataclass(frozen=True, slots=True)
class ScopedOutToken:
    """An active token without the inference scope: the gateway answers it 403, not 401,
    from its tables (no database lookup for a refused token)."""

    secret_hash: str
    expires_at: float | None

    def valid(self, secret: str, now: float) -> bool:
        return token_valid(self.secret_hash, self.expires_at, secret, now)


def token_valid(secret_hash: str, expires_at: float | None, secret: str, now: float) -> bool:
    digest = hashlib.sha256(secret.encode()).hexdigest()
    return hmac.compare_digest(secret_hash, digest) and (expires_at is None or now < expires_at)


@dataclass(frozen=True, slots=True)
class EngineInfo:
    name: str
    url: str
    key: str | None
    pool: str
    base_model_id: int
    served_model_name: str
    max_lora_rank: int
    max_loras: int
    max_cpu_loras: int
    capacity: int
    max_model_len: int = 0  # its context length as the prober saw it (0: not seen yet)
    # When the fleet last saw it answer (the prober, or the controller bringing it back), as a
    # Unix time: a gateway's own mark on an engine (a failed connection) holds only until then.
    seen_at: float = 0.0


@dataclass
class RouteTable:
    """Everything the request path needs, replaced whole on rebuild."""

    generation: int = -1
    callers: dict[str, Caller] = field(default_factory=dict)  # by token prefix
    scoped_out: dict[str, ScopedOutToken] = field(default_factory=dict)  # by token prefix
    # user id -> tenant id -> role, active users only (the playground's per-prompt check)
    members: dict[int, dict[int, str]] = field(default_factory=dict)
    tenants: dict[int, str] = field(default_factory=dict)  # id -> slug
    tenant_ids: dict[str, int] = field(default_factory=dict)  # slug -> id
    routes: dict[int, dict[str, Route]] = field(default_factory=dict)  # tenant -> name -> route
    base_routes: dict[str, Route] = field(default_factory=dict)
    rpm: dict[int, int] = field(default_factory=dict)  # tenant -> requests per minute
    pools: dict[int, str] = field(default_factory=dict)  # tenant -> pool its base-model calls use
    plans: dict[int, Plan] = field(default_factory=dict)  # tenant -> per-request bounds
    in_flight_caps: dict[int, int] = field(default_factory=dict)  # tenant -> requests at once
    salts: dict[int, str] = field(default_factory=dict)  # tenant -> its prefix-cache salt
    engines: tuple[EngineInfo, ...] = ()
    down: frozenset[str] = frozenset()  # engines the prober marked down
    # served name -> {engine: Tier.GPU | Tier.CPU} as the controller last observed
    residency: dict[str, dict[str, Tier]] = field(default_factory=dict)
    budgets: BudgetRules = field(default_factory=BudgetRules)
    built_at: float = 0.0
    # Service classes (docs/classes.md): tenant -> its class, token id -> the lower class it was
    # given, and every class's plan.
    classes: dict[int, str] = field(default_factory=dict)
    token_classes: dict[int, str] = field(default_factory=dict)
    class_plans: tuple[ClassPlan, ...] = DEFAULT_PLANS

    def service_class(self, tenant_id: int, token_id: int | None) -> str:
        """The class a request runs in: its tenant's, or its token's when that is lower."""
        tenant_class = self.classes.get(tenant_id, "")
        token_class = self.token_classes.get(token_id) if token_id is not None else None
        if not token_class or not tenant_class:
            return tenant_class
        order = [p.name for p in sorted(self.class_plans, key=lambda p: -p.weight)]
        if token_class in order and tenant_class in order:
            return max(tenant_class, token_class, key=order.index)
        return tenant_class

    def route_for(self, tenant_id: int, name: str) -> Route | None:
        return self.routes.get(tenant_id, {}).get(name) or self.base_routes.get(name)

    def names_for(self, tenant_ids: Iterable[int]) -> list[tuple[str, Route, int | None]]:
        tenant_ids = sorted(tenant_ids)
        # The base model is served as one of the caller's tenants: no tenant, no base model.
        out: list[tuple[str, Route, int | None]] = [
            (n, r, None) for n, r in sorted(self.base_routes.items()) if tenant_ids
        ]
        for tid in tenant_ids:
            out += [(n, r, tid) for n, r in sorted(self.routes.get(tid, {}).items())]
        return out


def parse_token(header: str) -> tuple[str, str] | None:
    """(prefix, secret) from `Bearer lp_<prefix>_<secret>`, or None."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.startswith(TOKEN_PREFIX):
        return None
    prefix, sep, secret = value[len(TOKEN_PREFIX) :].strip().partition("_")
    if not sep or not prefix or not secret or len(prefix) > 16:
        return None
    return prefix, secret


def _target(
    version: AdapterVersion, weight: int = 100, alias_max_concurrent: int | None = None
) -> Target:
    adapter = version.adapter
    return Target(
        served_name=version.served_name,
        version_id=version.pk,
        tenant_id=version.tenant_id,
        tenant=version.tenant.slug,
        adapter=adapter.name,
        number=version.number,
        pool=pool_of(adapter),
        base_model_id=adapter.base_model_id,
        rank=version.rank or 0,
        max_concurrent=adapter.effective_max_concurrent_requests,
        weight=weight,
        alias_max_concurrent=alias_max_concurrent,
    )


def _member_roles() -> dict[int, dict[int, str]]:
    """user id -> tenant id -> role, for active users (a deactivated user is nobody's member)."""
    roles: dict[int, dict[int, str]] = {}
    members = Membership.objects.filter(user__is_active=True)
    for user_id, tenant_id, role in members.values_list("user_id", "tenant_id", "role"):
        roles.setdefault(user_id, {})[tenant_id] = role
    return roles


def _callers(
    now: float, roles: dict[int, dict[int, str]]
) -> tuple[dict[str, Caller], dict[str, ScopedOutToken]]:
    """The active tokens: those with the inference scope as callers, the others apart."""
    tokens = (
        ApiToken.objects.filter(revoked_at__isnull=True, user__is_active=True)
        .select_related("user")
        .only("id", "prefix", "secret_hash", "scopes", "tenant_id", "expires_at", "user")
    )
    out: dict[str, Caller] = {}
    scoped_out: dict[str, ScopedOutToken] = {}
    for token in tokens:
        if token.expires_at is not None and token.expires_at.timestamp() <= now:
            continue
        if TokenScope.INFERENCE not in token.scopes:
            scoped_out[token.prefix] = ScopedOutToken(
                token.secret_hash, token.expires_at.timestamp() if token.expires_at else None
            )
            continue
        access = AccessContext.with_memberships(token.user, roles.get(token.user_id, {}), token)
        reach = {
            tid
            for tid, role in access.memberships.items()
            if role and access.tenant_can(Tenant(id=tid), "infer")
        }
        out[token.prefix] = Caller(
            prefix=token.prefix,
            secret_hash=token.secret_hash,
            user_id=token.user_id,
            bound_tenant_id=token.tenant_id,
            expires_at=token.expires_at.timestamp() if token.expires_at else None,
            tenant_ids=frozenset(reach),
            token_id=token.pk,
        )
    return out, scoped_out


def _routes() -> dict[int, dict[str, Route]]:
    routes: dict[int, dict[str, Route]] = {}
    active = (
        AdapterVersion.objects.filter(status=VersionStatus.ACTIVE)
        .select_related("adapter__tenant", "tenant")
        .order_by("adapter_id", "-number")
    )
    newest: dict[int, AdapterVersion] = {}
    for version in active:
        table = routes.setdefault(version.tenant_id, {})
        table[f"{version.adapter.name}@{version.number}"] = Route(
            f"{version.adapter.name}@{version.number}", (_target(version),)
        )
        newest.setdefault(version.adapter_id, version)
    for version in newest.values():
        routes[version.tenant_id][version.adapter.name] = Route(
            version.adapter.name, (_target(version),)
        )
    for alias in Alias.objects.prefetch_related(
        "targets__version__adapter__tenant", "targets__version__tenant"
    ):
        targets = tuple(
            _target(t.version, t.weight, t.max_concurrent)
            for t in alias.targets.all()
            if t.version.status == VersionStatus.ACTIVE and t.weight > 0
        )
        if targets:  # an alias whose versions are all disabled serves nothing: not found
            routes.setdefault(alias.tenant_id, {})[alias.name] = Route(
                alias.name,
                targets,
                alias=True,
                alias_id=alias.pk,
                sample_share=alias.live_sample_share,
            )
    return routes


def _engines() -> tuple[tuple[EngineInfo, ...], frozenset[str]]:
    """The engines that take traffic (warming, draining and down engines get none), and the
    names of those the prober marked down (their requests in flight move or end), in one query."""
    rows = Engine.objects.filter(state__in=(EngineState.UP, EngineState.DOWN)).order_by("name")
    up, down = [], set()
    for e in rows:
        if e.state == EngineState.DOWN:
            down.add(e.name)
            continue
        up.append(
            EngineInfo(
                name=e.name,
                url=e.url.rstrip("/"),
                key=engine_key(e),
                pool=e.pool,
                base_model_id=e.base_model_id,
                served_model_name=e.served_model_name,
                max_lora_rank=e.max_lora_rank,
                max_loras=e.max_loras,
                max_cpu_loras=e.max_cpu_loras,
                capacity=e.max_num_seqs,
                max_model_len=e.max_model_len,
                seen_at=e.last_seen_at.timestamp() if e.last_seen_at else 0.0,
            )
        )
    return tuple(up), frozenset(down)


def residency_map() -> dict[str, dict[str, Tier]]:
    """{served name: {engine: Tier.GPU | Tier.CPU}}. (An engine's pins are not taken from here: the
    gateway's admission reads them from the engine's pinned set, workers.engine_slots.)"""
    out: dict[str, dict[str, Tier]] = {}
    rows = Residency.objects.exclude(observed_state=ResidencyState.ABSENT).values_list(
        "version__served_name", "engine__name", "observed_state"
    )
    for served, engine, state in rows:
        gpu = state in (ResidencyState.RESIDENT_GPU, ResidencyState.PINNED)
        out.setdefault(served, {})[engine] = Tier.GPU if gpu else Tier.CPU
    return out


PLAN_FIELDS = tuple(Plan.__dataclass_fields__)


def default_plan() -> Plan:
    """The platform's defaults (a tenant created since the tables were built)."""
    return Plan(**{name: int(settings.GATEWAY_PLAN_DEFAULTS[name]) for name in PLAN_FIELDS})


def cache_salt(tenant_id: int) -> str:
    """The tenant's prefix-cache salt: vLLM keys cached blocks by it, so one tenant's prompts
    never hit (and so cannot be timed through) another's cache. Derived, never stored."""
    key = hashlib.sha256(b"lp-cache-salt:" + settings.SECRET_KEY.encode()).digest()
    return hmac.new(key, str(tenant_id).encode(), hashlib.sha256).hexdigest()[:32]


def build_table(generation: int) -> RouteTable:
    """The whole picture from the database, in a handful of queries."""
    now = time.time()
    tenant_rows = list(
        Tenant.objects.values(
            "id",
            "slug",
            "quota_requests_per_minute",
            "pool",
            "max_in_flight_requests",
            "slo_class",
            *PLAN_FIELDS,
        )
    )
    tenants = {row["id"]: row["slug"] for row in tenant_rows}
    residency = residency_map()
    roles = _member_roles()
    engines, down = _engines()
    callers, scoped_out = _callers(now, roles)
    return RouteTable(
        generation=generation,
        callers=callers,
        scoped_out=scoped_out,
        members=roles,
        tenants=tenants,
        tenant_ids={slug: tid for tid, slug in tenants.items()},
        routes=_routes(),
        base_routes={b.name: Route(b.name, base_model_id=b.pk) for b in BaseModel.objects.all()},
        rpm={row["id"]: row["quota_requests_per_minute"] for row in tenant_rows},
        pools={row["id"]: row["pool"] or settings.DEFAULT_POOL for row in tenant_rows},
        plans={row["id"]: Plan(**{name: row[name] for name in PLAN_FIELDS}) for row in tenant_rows},
        in_flight_caps={row["id"]: row["max_in_flight_requests"] for row in tenant_rows},
        salts={tid: cache_salt(tid) for tid in tenants},
        engines=engines,
        down=down,
        residency=residency,
        budgets=load_rules(),
        built_at=timezone.now().timestamp(),
        classes={row["id"]: row["slo_class"] for row in tenant_rows},
        token_classes=dict(
            ApiToken.objects.filter(revoked_at__isnull=True)
            .exclude(service_class="")
            .values_list("id", "service_class")
        ),
        class_plans=tuple(
            ClassPlan(c.name, c.weight, c.max_queue_wait_ms / 1000, c.sheddable)
            for c in ServiceClass.objects.all()
        )
        or DEFAULT_PLANS,
    )

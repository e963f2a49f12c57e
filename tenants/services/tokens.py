"""API tokens: issue (shown once), authenticate by prefix + hash, revoke."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.audit import record_event
from core.errors import ApplicationError
from tenants.access_port import Access
from tenants.models import ApiToken, Tenant, TokenScope

TOKEN_PREFIX = "lp_"
MAX_EXPIRY_DAYS = 365
# Writing last_used_at on every request would turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    plaintext: str


def _hash_secret(secret: str) -> str:
    # Secrets are 256 random bits, so a fast hash is enough; no password stretching needed.
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_scopes(scopes: list[str] | None) -> list[str]:
    if not scopes:
        raise ApplicationError(
            "token.scopes_required", f"Give at least one scope of: {', '.join(TokenScope.values)}."
        )
    unknown = sorted(set(scopes) - set(TokenScope.values))
    if unknown:
        raise ApplicationError(
            "token.unknown_scope",
            f"Unknown scope(s) {', '.join(unknown)}; valid scopes are {', '.join(TokenScope.values)}.",
        )
    return sorted(set(scopes))


def token_issue(
    *,
    access: Access,
    scopes: list[str],
    tenant: Tenant | None = None,
    name: str = "",
    expires_in_days: int | None = 90,
    days_given: bool = True,
    request_id: str = "",
) -> IssuedToken:
    """Create a token for the caller (access.require_token_issue decides where it may reach).

    A request that came with a token mints only within that token (token_confine_to_caller),
    and the new token dies with it (its `parent`). `days_given`: whether the caller chose the
    lifetime; if not, the default shrinks to fit inside the parent's.
    """
    access.require_token_issue(tenant)
    scopes = parse_scopes(scopes)
    if expires_in_days is not None and not 1 <= expires_in_days <= MAX_EXPIRY_DAYS:
        raise ApplicationError(
            "token.bad_expiry", f"expires_in_days must be between 1 and {MAX_EXPIRY_DAYS}."
        )
    expires_in_days = token_confine_to_caller(
        access, scopes=scopes, expires_in_days=expires_in_days, days_given=days_given
    )
    parent = access.token
    prefix = secrets.token_hex(5)
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=access.user,
            tenant=tenant,
            name=name[:100],
            prefix=prefix,
            secret_hash=_hash_secret(secret),
            scopes=scopes,
            parent=parent,
            expires_at=timezone.now() + timedelta(days=expires_in_days)
            if expires_in_days
            else None,
        )
        record_event(
            action="token.create",
            actor=access.user,
            tenant=tenant,
            obj=token,
            after={
                "prefix": prefix,
                "scopes": scopes,
                "expires_at": token.expires_at,
                "name": token.name,
                "parent": parent.prefix if parent is not None else None,
            },
            request_id=request_id,
        )
    return IssuedToken(token=token, plaintext=f"{TOKEN_PREFIX}{prefix}_{secret}")


def token_revoke(*, access: Access, token: ApiToken, request_id: str = "") -> ApiToken:
    """Revoke `token` (access.require_token_revoke decides who may) and every token minted from
    it, at any depth (each one audited): a token minted by another dies with it, or a leaked
    token could outlive its own revocation."""
    access.require_token_revoke(token)
    actor = access.user
    with transaction.atomic():
        locked = ApiToken.objects.select_for_update().get(pk=token.pk)
        if locked.revoked_at is not None:
            raise ApplicationError(
                "token.already_revoked", "This token is already revoked.", status=409
            )
        now = timezone.now()
        locked.revoked_at = now
        # save(), not update(): its signal tells the gateway replicas to re-read their tokens.
        locked.save(update_fields=["revoked_at"])
        _audit_revoke(locked, actor=actor, request_id=request_id)
        for child in _live_descendants(locked):
            child.revoked_at = now
            child.save(update_fields=["revoked_at"])
            _audit_revoke(child, actor=actor, request_id=request_id, cascade_from=locked)
    return locked


def tokens_revoke_for_user(
    *,
    user: Any,
    actor: str,
    reason: str,
    tenant_ids: list[int] | None = None,
    request_id: str = "",
) -> int:
    """Revoke a person's live tokens (those bound to `tenant_ids`, or all), each audited with
    the reason: for the SSO sync, when the mapping takes access away. How many were revoked."""
    live = ApiToken.objects.select_for_update(of=("self",)).select_related("tenant")
    live = live.filter(user=user, revoked_at__isnull=True)
    if tenant_ids is not None:
        live = live.filter(tenant_id__in=tenant_ids)
    now = timezone.now()
    count = 0
    with transaction.atomic():
        for token in live.order_by("pk"):
            token.revoked_at = now
            token.save(update_fields=["revoked_at"])  # save(): the gateway re-reads its tokens
            _audit_revoke(token, actor=actor, request_id=request_id, reason=reason)
            count += 1
    return count


def _live_descendants(token: ApiToken) -> list[ApiToken]:
    """Unrevoked tokens minted from `token`, its children first, locked for the revocation."""
    found: list[ApiToken] = []
    parents = [token.pk]
    while parents:
        children = list(
            ApiToken.objects.select_for_update(of=("self",))
            .select_related("tenant")
            .filter(parent_id__in=parents, revoked_at__isnull=True)
            .order_by("pk")
        )
        found += children
        parents = [child.pk for child in children]
    return found


def _audit_revoke(
    token: ApiToken,
    *,
    actor: Any,
    request_id: str,
    cascade_from: ApiToken | None = None,
    reason: str = "",
) -> None:
    after: dict[str, Any] = {"revoked_at": token.revoked_at}
    if cascade_from is not None:
        after["cascade_from"] = cascade_from.prefix
    if reason:
        after["reason"] = reason
    record_event(
        action="token.revoke",
        actor=actor,
        tenant=token.tenant,
        obj=token,
        before={"revoked_at": None},
        after=after,
        request_id=request_id,
    )


def token_authenticate(plaintext: str) -> ApiToken | None:
    """The active token for `plaintext`, or None; never says which part was wrong."""
    if not plaintext.startswith(TOKEN_PREFIX):
        return None
    prefix, sep, secret = plaintext[len(TOKEN_PREFIX) :].partition("_")
    if not sep or not prefix or not secret or len(prefix) > 16:
        return None
    token = ApiToken.objects.select_related("user", "tenant").filter(prefix=prefix).first()
    if token is None or not hmac.compare_digest(token.secret_hash, _hash_secret(secret)):
        return None
    now = timezone.now()
    if not token.is_active(now) or not token.user.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def token_confine_to_caller(
    access: Access, *, scopes: list[str], expires_in_days: int | None, days_given: bool
) -> int | None:
    """A token may mint tokens only within itself: no scope it lacks, no later expiry (the
    default lifetime shrinks to fit; an explicit longer one is refused). The lifetime to use."""
    if access.token is None:
        return expires_in_days
    for scope in scopes:
        access.require_scope(scope)
    parent_expiry = access.token.expires_at
    if parent_expiry is None:
        return expires_in_days
    days_left = (parent_expiry - timezone.now()).days
    if not days_given and expires_in_days is not None:
        expires_in_days = min(expires_in_days, days_left)
    if (
        expires_in_days is None
        or expires_in_days < 1
        or timezone.now() + timedelta(days=expires_in_days) > parent_expiry
    ):
        raise ApplicationError(
            "token.bad_expiry",
            f"A token cannot mint a token that outlives it ({days_left} whole days left).",
        )
    return expires_in_days

"""A tenant's signing keys and its signature policy: register, revoke, require. Every change audited.

Keys are public keys only (EC P-256/P-384 or Ed25519, PEM); validation trusts the tenant's keys
that are not revoked. A revoked key keeps its row, so old reports still name their signer.
"""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from adapters.validation.signatures import EC_CURVES, key_algorithm_name, key_fingerprint
from core.audit import record_event
from core.errors import ApplicationError, Conflict, NotFound
from tenants.access_port import Access
from tenants.models import SLUG_VALIDATOR, SigningKey, Tenant

MAX_PEM_CHARS = 16 * 1024


def parse_public_key(pem: str) -> tuple[str, str]:
    """(algorithm, normalised PEM) of a supported public key, or an ApplicationError saying why not."""
    if not isinstance(pem, str) or not pem.strip():
        raise ApplicationError("signing_key.invalid_pem", "public_key_pem is empty.")
    if len(pem) > MAX_PEM_CHARS:
        raise ApplicationError(
            "signing_key.invalid_pem", f"public_key_pem is longer than {MAX_PEM_CHARS} characters."
        )
    if "PRIVATE KEY" in pem:
        raise ApplicationError(
            "signing_key.private_key",
            "This is a private key. Register the public key only "
            "(e.g. `openssl pkey -in key.pem -pubout`), and treat the private key as exposed.",
        )
    try:
        key = serialization.load_pem_public_key(pem.strip().encode())
    except (ValueError, TypeError, UnicodeEncodeError):
        raise ApplicationError(
            "signing_key.invalid_pem",
            "public_key_pem is not a PEM public key (-----BEGIN PUBLIC KEY----- ...).",
        ) from None
    if isinstance(key, ed25519.Ed25519PublicKey) or (
        isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in EC_CURVES
    ):
        algorithm = key_algorithm_name(key)
    else:
        kind = key.curve.name if isinstance(key, ec.EllipticCurvePublicKey) else type(key).__name__
        raise ApplicationError(
            "signing_key.unsupported_type",
            f"Keys of type {kind} are not accepted; use an EC P-256 or P-384 key "
            "(as model-signing does) or Ed25519.",
        )
    normalised = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return algorithm, normalised.decode()


def key_algorithm(key: SigningKey) -> str:
    try:
        return parse_public_key(key.public_key_pem)[0]
    except ApplicationError:
        return "unknown"


def signing_keys_of(*, tenant: Tenant) -> QuerySet[SigningKey]:
    return (
        SigningKey.objects.filter(tenant=tenant)
        .select_related("created_by")
        .order_by("created_at", "id")
    )


def signing_key_get(*, tenant: Tenant, name: str) -> SigningKey:
    key = signing_keys_of(tenant=tenant).filter(name=name).first()
    if key is None:
        raise NotFound(
            "signing_key.not_found", f"Tenant '{tenant.slug}' has no signing key '{name}'."
        )
    return key


def signing_key_add(
    *, access: Access, tenant: Tenant, name: str, public_key_pem: str, request_id: str = ""
) -> SigningKey:
    access.require_tenant(tenant, "manage_keys")
    try:
        SLUG_VALIDATOR(name)
    except ValidationError:
        raise ApplicationError(
            "signing_key.bad_name", "name: use 1-40 lowercase letters, digits and single hyphens."
        ) from None
    algorithm, pem = parse_public_key(public_key_pem)
    fingerprint = key_fingerprint(pem)
    try:
        with transaction.atomic():
            Tenant.objects.select_for_update().get(
                pk=tenant.pk
            )  # one registration at a time per tenant
            for existing in SigningKey.objects.filter(tenant=tenant, revoked_at__isnull=True):
                if key_fingerprint(existing.public_key_pem) == fingerprint:
                    raise Conflict(
                        "signing_key.duplicate",
                        f"This public key is already registered as '{existing.name}'.",
                    )
            key = SigningKey.objects.create(
                tenant=tenant, name=name, public_key_pem=pem, created_by=access.user
            )
            record_event(
                action="signing_key.add",
                actor=access.user,
                tenant=tenant,
                obj=key,
                object_id=f"{tenant.slug}:{name}",
                after={"name": name, "algorithm": algorithm, "fingerprint": fingerprint},
                request_id=request_id,
            )
    except IntegrityError:
        raise Conflict(
            "signing_key.exists",
            f"Tenant '{tenant.slug}' already has a key named '{name}' "
            "(revoked keys keep their names); choose another name.",
        ) from None
    return key


def signing_key_revoke(*, access: Access, key: SigningKey, request_id: str = "") -> SigningKey:
    access.require_tenant(key.tenant, "manage_keys")
    with transaction.atomic():
        locked = SigningKey.objects.select_for_update().select_related("tenant").get(pk=key.pk)
        if locked.revoked_at is not None:
            raise Conflict(
                "signing_key.already_revoked",
                f"Key '{locked.name}' was revoked at {locked.revoked_at}.",
            )
        locked.revoked_at = timezone.now()
        locked.save(update_fields=["revoked_at"])
        record_event(
            action="signing_key.revoke",
            actor=access.user,
            tenant=locked.tenant,
            obj=locked,
            object_id=f"{locked.tenant.slug}:{locked.name}",
            before={"revoked_at": None},
            after={
                "revoked_at": locked.revoked_at,
                "fingerprint": key_fingerprint(locked.public_key_pem),
            },
            request_id=request_id,
        )
    return locked


def signature_policy_set(
    *, access: Access, tenant: Tenant, require_signatures: bool, request_id: str = ""
) -> Tenant:
    """Turn signed-upload enforcement on or off; on needs at least one active key to verify with."""
    access.require_tenant(tenant, "manage_keys")
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = locked.require_signatures
        if (
            require_signatures
            and not SigningKey.objects.filter(tenant=locked, revoked_at__isnull=True).exists()
        ):
            raise Conflict(
                "signature_policy.no_keys",
                "Register a signing key first: with none, every upload would be rejected.",
            )
        if before != require_signatures:
            locked.require_signatures = require_signatures
            locked.save(update_fields=["require_signatures"])
            record_event(
                action="tenant.signature_policy",
                actor=access.user,
                tenant=locked,
                obj=locked,
                object_id=locked.slug,
                before={"require_signatures": before},
                after={"require_signatures": require_signatures},
                request_id=request_id,
            )
    return locked


def signature_policy(*, tenant: Tenant) -> dict[str, Any]:
    return {
        "require_signatures": tenant.require_signatures,
        "active_keys": SigningKey.objects.filter(tenant=tenant, revoked_at__isnull=True).count(),
    }

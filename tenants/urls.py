"""Page URLs for tenancy: the user's API tokens; a tenant's members, grants, tokens and keys."""

from django.urls import path

from tenants import pages, pages_access, pages_keys

TENANT = "t/<slug:tenant>/"

urlpatterns = [
    path("tokens/", pages.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", pages.token_revoke_page, name="token-revoke"),
    path(TENANT + "members/", pages_access.members, name="tenant-members"),
    path(
        TENANT + "members/<str:username>/remove/",
        pages_access.member_remove,
        name="member-remove",
    ),
    path(TENANT + "grants/", pages_access.grant_add, name="grant-add"),
    path(
        TENANT + "grants/<slug:adapter>/<str:username>/revoke/",
        pages_access.grant_revoke,
        name="grant-revoke",
    ),
    path(
        TENANT + "tokens/<str:prefix>/revoke/",
        pages_access.tenant_token_revoke,
        name="tenant-token-revoke",
    ),
    path(TENANT + "keys/", pages_keys.keys, name="tenant-keys"),
    path(TENANT + "keys/<slug:key>/revoke/", pages_keys.key_revoke, name="signing-key-revoke"),
    path(TENANT + "signature-policy/", pages_keys.signature_policy, name="signature-policy-set"),
]

"""Page URLs for the registry: tenant adapters and versions, uploads, aliases, the review queue,
a tenant's access page (members, per-adapter grants, tokens), the platform's base models."""

from django.urls import path

from adapters.pages import access, adapter_forms, aliases, base_models, registry, review, upload

TENANT = "t/<slug:tenant>/"
VERSION = "t/<slug:tenant>/a/<slug:adapter>/v/<int:number>/"

urlpatterns = [
    # a tenant's access page: members, per-adapter grants, tokens bound to it
    path(TENANT + "members/", access.members, name="tenant-members"),
    path(
        TENANT + "members/<str:username>/remove/",
        access.member_remove,
        name="member-remove",
    ),
    path(TENANT + "grants/", access.grant_add, name="grant-add"),
    path(
        TENANT + "grants/<slug:adapter>/<str:username>/revoke/",
        access.grant_revoke,
        name="grant-revoke",
    ),
    path(
        TENANT + "tokens/<str:prefix>/revoke/",
        access.tenant_token_revoke,
        name="tenant-token-revoke",
    ),
    path("review/", review.review_queue, name="review-queue"),
    path(
        "review/<slug:tenant>/<slug:adapter>/<int:number>/approve/",
        review.review_approve,
        name="review-approve",
    ),
    path(
        "review/<slug:tenant>/<slug:adapter>/<int:number>/reject/",
        review.review_reject,
        name="review-reject",
    ),
    path("t/<slug:tenant>/", registry.tenant_adapters, name="tenant-adapters"),
    path(
        "t/<slug:tenant>/adapters/new/",
        adapter_forms.adapter_create_page,
        name="adapter-create",
    ),
    path("t/<slug:tenant>/aliases/", aliases.aliases, name="tenant-aliases"),
    path(
        "t/<slug:tenant>/aliases/<slug:alias>/delete/",
        aliases.alias_delete_page,
        name="alias-delete",
    ),
    path(
        "t/<slug:tenant>/aliases/<slug:alias>/promote/",
        aliases.alias_promote_page,
        name="alias-promote",
    ),
    path(
        "t/<slug:tenant>/aliases/<slug:alias>/rollback/",
        aliases.alias_rollback_page,
        name="alias-rollback",
    ),
    path("t/<slug:tenant>/a/<slug:adapter>/", registry.adapter_detail, name="adapter-detail"),
    path(
        "t/<slug:tenant>/a/<slug:adapter>/settings/",
        adapter_forms.adapter_update_page,
        name="adapter-update",
    ),
    path(
        "t/<slug:tenant>/a/<slug:adapter>/upload/",
        upload.version_upload_page,
        name="version-upload",
    ),
    path(
        "t/<slug:tenant>/a/<slug:adapter>/uploads/<str:upload>/abort/",
        upload.direct_upload_abort_page,
        name="direct-upload-abort",
    ),
    path(VERSION, registry.version_detail, name="version-detail"),
    path(VERSION + "release/", registry.version_release_page, name="version-release"),
    path(VERSION + "disable/", registry.version_disable_page, name="version-disable"),
    path("platform/base-models/", base_models.base_models, name="platform-base-models"),
]

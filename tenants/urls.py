"""Page URLs for tenancy: the user's API tokens; a tenant's signing keys. (A tenant's members,
grants and tokens are on its access page, adapters/pages/access.py: it lists the adapters.)"""

from django.urls import path

from tenants import pages, pages_keys
from tenants.notifications import pages as notification_pages

TENANT = "t/<slug:tenant>/"

urlpatterns = [
    path("tokens/", pages.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", pages.token_revoke_page, name="token-revoke"),
    path(TENANT + "keys/", pages_keys.keys, name="tenant-keys"),
    path(TENANT + "keys/<slug:key>/revoke/", pages_keys.key_revoke, name="signing-key-revoke"),
    path(TENANT + "signature-policy/", pages_keys.signature_policy, name="signature-policy-set"),
    path(
        TENANT + "notifications/",
        notification_pages.notifications,
        name="tenant-notifications",
    ),
    path(
        TENANT + "notifications/recipients/",
        notification_pages.recipient_add,
        name="email-recipient-add",
    ),
    path(
        TENANT + "notifications/recipients/remove/",
        notification_pages.recipient_remove,
        name="email-recipient-remove",
    ),
    path(
        TENANT + "notifications/<int:notification>/dismiss/",
        notification_pages.notice_dismiss,
        name="notice-dismiss",
    ),
    path(TENANT + "notifications/webhooks/", notification_pages.webhook_add, name="webhook-add"),
    path(
        TENANT + "notifications/webhooks/<slug:webhook>/active/",
        notification_pages.webhook_active,
        name="webhook-active",
    ),
    path(
        TENANT + "notifications/webhooks/<slug:webhook>/delete/",
        notification_pages.webhook_delete,
        name="webhook-delete",
    ),
]

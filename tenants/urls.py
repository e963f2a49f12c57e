"""Page URLs for tenancy: sign-in and out, and single sign-on's protocol edges; the user's API
tokens; a tenant's signing keys and notifications; the platform admins' tenants, users and
sign-on mappings. (A tenant's members, grants and tokens are on its access page,
adapters/pages/access.py: it lists the adapters.)"""

from django.contrib.auth import views as auth_views
from django.urls import path

from tenants.notifications import pages as notification_pages
from tenants.pages import keys, platform, tokens
from tenants.sso import cli_views
from tenants.sso import views as sso_views
from tenants.sso.pages import mappings as sso_mappings

TENANT = "t/<slug:tenant>/"

urlpatterns = [
    path("login/", sso_views.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Sign-in through an identity provider, and `lora-portal login --sso` (client/): the
    # providers it may use, the ID token trade.
    path("sso/callback/", sso_views.SsoCallbackView.as_view(), name="sso-callback"),
    path("sso/cli/providers/", cli_views.cli_providers, name="sso-cli-providers"),
    path("sso/cli/token/", cli_views.cli_token, name="sso-cli-token"),
    path("sso/<slug:provider>/start/", sso_views.SsoStartView.as_view(), name="sso-start"),
    path(
        "sso/<slug:provider>/backchannel-logout/",
        sso_views.backchannel_logout_view,
        name="sso-backchannel-logout",
    ),
    path("tokens/", tokens.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", tokens.token_revoke_page, name="token-revoke"),
    path("tokens/<int:token_id>/class/", tokens.token_class_page, name="token-class"),
    path(TENANT + "keys/", keys.keys, name="tenant-keys"),
    path(TENANT + "keys/<slug:key>/revoke/", keys.key_revoke, name="signing-key-revoke"),
    path(TENANT + "signature-policy/", keys.signature_policy, name="signature-policy-set"),
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
    # platform admins
    path("platform/", platform.platform_tenants, name="platform-home"),
    path("platform/tenants/<slug:tenant>/", platform.platform_tenant, name="platform-tenant"),
    path("platform/users/", platform.platform_users, name="platform-users"),
    path("platform/classes/", platform.platform_classes, name="platform-classes"),
    path(
        "platform/users/<str:username>/roles/",
        platform.platform_user_roles,
        name="platform-user-roles",
    ),
    path(
        "platform/users/<str:username>/active/",
        platform.platform_user_active,
        name="platform-user-active",
    ),
    path("platform/sso/", sso_mappings.platform_sso, name="platform-sso"),
    path("platform/sso/dry-run/", sso_mappings.platform_sso_dry_run, name="platform-sso-dry-run"),
    path(
        "platform/sso/mappings/<int:mapping_id>/delete/",
        sso_mappings.platform_sso_mapping_delete,
        name="platform-sso-mapping-delete",
    ),
]

"""Sign-in through an identity provider (mounted at /sso/ by portal/urls.py)."""

from django.urls import path

from tenants.sso import cli_views, views

urlpatterns = [
    path("callback/", views.SsoCallbackView.as_view(), name="sso-callback"),
    # `lora-portal login --sso` (client/): the providers it may use, the ID token trade.
    path("cli/providers/", cli_views.cli_providers, name="sso-cli-providers"),
    path("cli/token/", cli_views.cli_token, name="sso-cli-token"),
    path("<slug:provider>/start/", views.SsoStartView.as_view(), name="sso-start"),
    path(
        "<slug:provider>/backchannel-logout/",
        views.backchannel_logout_view,
        name="sso-backchannel-logout",
    ),
]

"""Sign-in through an identity provider (mounted at /sso/ by portal/urls.py)."""

from django.urls import path

from tenants.sso import views

urlpatterns = [
    path("callback/", views.SsoCallbackView.as_view(), name="sso-callback"),
    path("<slug:provider>/start/", views.SsoStartView.as_view(), name="sso-start"),
    path(
        "<slug:provider>/backchannel-logout/",
        views.backchannel_logout_view,
        name="sso-backchannel-logout",
    ),
]

from django.contrib.auth import views as auth_views
from django.urls import include, path

from tests.oidc_provider import control

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("control/users/", control.users),
    path("control/clients/", control.clients),
    path("control/tamper/", control.tamper_next),
    path("control/logout-token/", control.logout_token),
]

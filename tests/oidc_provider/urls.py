from django.contrib.auth import views as auth_views
from django.http import HttpResponseNotFound
from django.urls import include, path

from tests.oidc_provider import control, device

if device.enabled():
    device_grant = [
        path("o/.well-known/openid-configuration", device.DiscoveryView.as_view()),
        path("o/device-authorization/", device.DeviceStartView.as_view()),
        path("o/token/", device.DeviceTokenView.as_view()),
    ]
else:  # the library's endpoints stay closed: the discovery does not offer the grant
    device_grant = [path("o/device-authorization/", lambda request: HttpResponseNotFound())]

urlpatterns = [
    *device_grant,
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("control/users/", control.users),
    path("control/clients/", control.clients),
    path("control/tamper/", control.tamper_next),
    path("control/logout-token/", control.logout_token),
    path("control/device/", control.device_code),
]

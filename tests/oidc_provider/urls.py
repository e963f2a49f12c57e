from django.contrib.auth import views as auth_views
from django.http import HttpResponseNotFound
from django.urls import include, path

from tests.oidc_provider import control, device, switches

if device.enabled():
    device_grant = [path("o/device-authorization/", device.DeviceStartView.as_view())]
else:  # the library's endpoints stay closed: the discovery does not offer the grant
    device_grant = [path("o/device-authorization/", lambda request: HttpResponseNotFound())]

urlpatterns = [
    *device_grant,
    # The library's discovery, keys and token endpoint, as the switches and the device grant
    # change them (tests/oidc_provider/switches.py).
    path("o/.well-known/openid-configuration", switches.DiscoveryView.as_view()),
    path("o/.well-known/jwks.json", switches.CountedJwksView.as_view()),
    path("o/token/", switches.SwitchedTokenView.as_view()),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("control/users/", control.users),
    path("control/clients/", control.clients),
    path("control/tamper/", control.tamper_next),
    path("control/switches/", control.switch),
    path("control/counts/", control.counts),
    path("control/logout-token/", control.logout_token),
    path("control/device/", control.device_code),
]

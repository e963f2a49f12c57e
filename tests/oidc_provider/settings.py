"""The test provider's settings: read from the environment the fixture (or `make run`) sets."""

import os
from pathlib import Path

DIR = Path(os.environ["OIDC_PROVIDER_DIR"])
SECRET_KEY = os.environ.get("OIDC_PROVIDER_SECRET_KEY", "oidc-provider-test-secret-key-0123456789")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.oidc_provider.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DIR / "provider.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
USE_TZ = True
LOGIN_URL = "/accounts/login/"
SESSION_COOKIE_NAME = "idp_session"  # not the portal's `sessionid` on the same host
CSRF_COOKIE_NAME = "idp_csrftoken"
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": (DIR / "rsa.pem").read_text(),
    "PKCE_REQUIRED": True,
    "SCOPES": {"openid": "OpenID Connect", "profile": "Profile", "email": "E-mail"},
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validator.TestProviderValidator",
    "ID_TOKEN_EXPIRE_SECONDS": int(os.environ.get("OIDC_PROVIDER_ID_TOKEN_SECONDS", "300")),
    "ACCESS_TOKEN_EXPIRE_SECONDS": int(os.environ.get("OIDC_PROVIDER_ID_TOKEN_SECONDS", "300")),
}
STATIC_URL = "/static/"

# The device authorization grant (tests/oidc_provider/device.py), advertised with --device-grant.
URL = os.environ.get("OIDC_PROVIDER_URL", "http://127.0.0.1")
OAUTH2_PROVIDER |= {
    "OIDC_SERVER_CLASS": "tests.oidc_provider.device.DeviceGrantServer",
    "OAUTH_DEVICE_VERIFICATION_URI": f"{URL}/o/device/",
    "OAUTH_DEVICE_VERIFICATION_URI_COMPLETE": f"{URL}/o/device/?user_code={{user_code}}",
    "DEVICE_FLOW_INTERVAL": int(os.environ.get("OIDC_PROVIDER_DEVICE_INTERVAL", "5")),
    # The validator sets the person from the approved code (device.poll_status).
    "OAUTH_PRE_TOKEN_VALIDATION": [],
}

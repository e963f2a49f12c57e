"""Settings for the test suite: production settings with test services and fast hashing."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production-0123456789")
os.environ.setdefault("DATABASE_URL", "postgres://root@127.0.0.1:5432/lora_portal")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost,127.0.0.1")
os.environ.setdefault(
    "PORTAL_VAR_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test")
)

from portal.settings import *  # noqa: E402,F403
from portal.settings import DATABASES  # noqa: E402

if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # Lets the test database flush TRUNCATE the append-only audit table (see portal migration 0002).
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = (
        "-c lora_portal.audit_maintenance=on"
    )

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
# Tests that serve portal.asgi under uvicorn (browser, live pages, playground) get the static files
# straight from static/, with no collectstatic step (WhiteNoise reads them once at start-up).
WHITENOISE_USE_FINDERS = True

"""Settings for LoRA Portal, read from the environment (see README's settings table)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import dj_database_url
from redis.connection import parse_url as parse_redis_url

from portal.env import (
    SettingError,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_json_object,
    env_list,
    env_oidc_providers,
    env_proxy_ssl_header,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(
    env_str(
        "PORTAL_VAR_DIR",
        str(BASE_DIR / "var"),
        doc=(
            "where the portal keeps its local files (development secrets, the SQLite database, local "
            "storage, engine adapters by default)"
        ),
        shown="var/ in the checkout",
    )
)
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", False, doc="development mode (`make run` sets 1)", shown="`0`")


def _development_secret(name: str, make: Callable[[], str]) -> str:
    """Development only: one secret per checkout in var/, kept so it survives restarts."""
    key_file = VAR_DIR / name
    if not key_file.exists():
        key_file.write_text(make())
        key_file.chmod(0o600)
    return key_file.read_text().strip()


def _secret_key() -> str:
    configured = env_str(
        "SECRET_KEY",
        "",
        doc="required (32+ chars) when `DJANGO_DEBUG` is off",
        shown="generated into `var/` when debugging",
    )
    if configured:
        if len(configured) < 32:
            raise SettingError("SECRET_KEY must be at least 32 characters long")
        return configured
    if not DEBUG:
        raise SettingError("SECRET_KEY is required when DJANGO_DEBUG is off")
    return _development_secret("dev-secret-key", lambda: secrets.token_urlsafe(50))


SECRET_KEY = _secret_key()


def _audit_chain_key() -> str:
    configured = env_str(
        "AUDIT_CHAIN_KEY",
        "",
        doc=(
            "HMAC key of the audit chain (32+ chars); set your own in production, keep it out of the "
            "database, never change it"
        ),
        shown="derived from `SECRET_KEY`",
    )
    if configured:
        if len(configured) < 32:
            raise SettingError("AUDIT_CHAIN_KEY must be at least 32 characters long")
        return configured
    # Derived from SECRET_KEY when unset, so rotating SECRET_KEY would break the chain check:
    # production sets its own (README). Never stored in the database.
    return hmac.new(SECRET_KEY.encode(), b"lora-portal audit chain v1", hashlib.sha256).hexdigest()


AUDIT_CHAIN_KEY = _audit_chain_key()
AUDIT_CHAIN_KEY_DERIVED = not env_str("AUDIT_CHAIN_KEY", "")  # a deploy warning (portal.checks)


def _evidence_signing_seed() -> str:
    """The 32-byte Ed25519 seed (hex) that signs compliance records (portal.evidence_signing).

    A secret of its own, never derived from SECRET_KEY (rotating that must not change who signs
    records). Required outside debug: empty here then, and `check --deploy` fails (portal.E002)
    and the record endpoints answer 503 until it is set. Development gets one per checkout."""
    configured = env_str(
        "EVIDENCE_SIGNING_KEY",
        "",
        doc=(
            "required (64 hex digits, an Ed25519 seed) when `DJANGO_DEBUG` is off: signs compliance "
            "records; its own secret, not derived from `SECRET_KEY` (`portal.E002`)"
        ),
        shown="generated into `var/` when debugging",
    )
    if configured:
        if len(configured) != 64 or any(c not in "0123456789abcdefABCDEF" for c in configured):
            raise SettingError("EVIDENCE_SIGNING_KEY must be 64 hex digits (an Ed25519 seed)")
        return configured.lower()
    if not DEBUG:
        return ""
    return _development_secret("dev-evidence-key", lambda: secrets.token_hex(32))


def _evidence_verify_keys() -> list[str]:
    """Public keys (base64) the portal signed records with before its current one: published
    beside it, so records signed before a rotation still verify (docs/security.md)."""
    keys = env_list(
        "EVIDENCE_VERIFY_KEYS",
        [],
        doc=(
            "comma-separated base64 public keys the portal signed records with before a rotation: "
            "published beside the current key, so those records still verify"
        ),
        shown="empty",
    )
    for key in keys:
        try:
            raw = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise SettingError(
                f"EVIDENCE_VERIFY_KEYS: {key!r} is not a base64 Ed25519 public key (32 bytes)"
            )
    return keys


EVIDENCE_SIGNING_KEY = _evidence_signing_seed()
EVIDENCE_VERIFY_KEYS = _evidence_verify_keys()
# How often beat writes the audit chain head to the object store (portal.audit_checkpoint).
AUDIT_CHECKPOINT_SECONDS = env_int(
    "AUDIT_CHECKPOINT_SECONDS",
    300,
    minimum=10,
    doc="how often beat checkpoints the audit chain head to the object store",
    shown="`300`",
)
ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS",
    ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [],
    doc="comma-separated",
    shown="localhost names when debugging",
)
CSRF_TRUSTED_ORIGINS = env_list(
    "CSRF_TRUSTED_ORIGINS", [], doc="comma-separated origins behind a proxy", shown="empty"
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI from our static files, no CDN
    "guardian",
    "channels",
    "django_celery_beat",
    "axes",
    "portal",
    "tenants",
    "adapters",
    "workers",
    "budgets",
    "gateway",
    "evals",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "portal.middleware.RequestIdMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # An SSO session ends when its provider stops vouching for the person (tenants/sso);
    # after the messages, which tell the person why.
    "tenants.sso.session.SsoSessionRecheck",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: turns a lockout into core.login_guard's 429.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str(
            "DATABASE_URL",
            f"sqlite:///{VAR_DIR / 'portal.sqlite3'}",
            doc="e.g. `postgres://user@host:5432/portal`",
            shown="`sqlite:///var/portal.sqlite3`",
        ),
        conn_max_age=env_int(
            "DATABASE_CONN_MAX_AGE",
            0,
            minimum=0,
            doc=(
                "seconds a connection is kept between requests when the pool is off; setting it "
                "turns `DATABASE_POOL` off"
            ),
            shown="`0`",
        ),
    )
}
if (
    DATABASES["default"]["ENGINE"].endswith("postgresql")
    and env_bool(
        "DATABASE_POOL",
        True,
        doc=(
            "PostgreSQL: a connection pool per process (`DATABASE_POOL_MIN` 1, `DATABASE_POOL_MAX` "
            "20, `DATABASE_POOL_TIMEOUT` 10 s); off when `DATABASE_CONN_MAX_AGE` is set"
        ),
        shown="`1`",
    )
    and not DATABASES["default"]["CONN_MAX_AGE"]  # Django: a pool excludes persistent ones
):
    # A pool per process (psycopg_pool, Django's own support): under ASGI every request and
    # every database_sync_to_async call closes its connection, so without one each of them
    # opened a new PostgreSQL connection (a backend process forked for a query or two).
    # Celery's prefork children close the pool they inherit (celery.fixups.django).
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int(
            "DATABASE_POOL_MIN",
            1,
            minimum=0,
            doc="connections a process's pool keeps open",
            shown="`1`",
        ),
        "max_size": env_int(
            "DATABASE_POOL_MAX",
            20,
            minimum=1,
            doc=(
                "connections a process's pool opens at most; size PostgreSQL's `max_connections` for "
                "the sum"
            ),
            shown="`20`",
        ),
        "timeout": env_int(
            "DATABASE_POOL_TIMEOUT",
            10,
            minimum=1,
            doc="seconds a request waits for a pooled connection before an error",
            shown="`10`",
        ),
        # Its background threads only open and check connections; one is enough, and each
        # thread costs address space (a stack, a malloc arena) that a memory limit counts.
        "num_workers": 1,
    }
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The embedded default is shared by the portal, a Celery worker and beat: wait for locks
    # instead of failing, take the write lock up front, and let readers run beside a writer.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str(
    "REDIS_URL",
    "redis://127.0.0.1:6379/0",
    doc="Celery broker and results, Channels layers (the live numbers on pub/sub), cache",
    shown="`redis://127.0.0.1:6379/0`",
)
# Redis pub/sub ignores the database number: a PUBLISH on database 3 reaches a subscriber on
# database 5. Every pub/sub channel name carries the database, so deployments (and test
# workers) sharing one Redis server on different databases never hear each other's messages.
REDIS_PUBSUB_SCOPE = f"db{parse_redis_url(REDIS_URL).get('db', 0)}"

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env_str(
            "CACHE_KEY_PREFIX", "lp", doc="prefix of the portal's cache keys in Redis", shown="`lp`"
        ),
    }
}

AUTHENTICATION_BACKENDS = [
    # First: refuses authentication for a locked-out client before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    # A gate, before the password check: with SSO_LOCAL_PASSWORDS off it refuses every local
    # password but the break-glass admin's.
    "tenants.sso.backends.LocalPasswordGate",
    "django.contrib.auth.backends.ModelBackend",
    # Sessions of people signed in through an OpenID Connect provider (tenants/sso).
    "tenants.sso.backends.SsoBackend",
    "guardian.backends.ObjectPermissionBackend",
]
# No anonymous guardian user: an unauthenticated request has no permissions at all.
ANONYMOUS_USER_NAME = None
GUARDIAN_RAISE_403 = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# --- sign-ins: throttled per client address (core.login_guard, core.client_ip) ---
# Reverse proxies in front of the portal that append to X-Forwarded-For; 0 uses REMOTE_ADDR.
TRUSTED_PROXY_COUNT = env_int(
    "TRUSTED_PROXY_COUNT",
    0,
    minimum=0,
    doc=(
        "reverse proxies that append to X-Forwarded-For; the client address (login lockouts, token "
        "throttle) is the Nth from the right; 0: `REMOTE_ADDR`"
    ),
    shown="`0`",
)
LOGIN_FAILURE_LIMIT = env_int(
    "LOGIN_FAILURE_LIMIT",
    10,
    minimum=1,
    doc="failed sign-ins from one address before it is locked out (page, admin, token endpoint)",
    shown="`10`",
)
LOGIN_LOCKOUT_SECONDS = env_int(
    "LOGIN_LOCKOUT_SECONDS",
    900,
    minimum=1,
    doc="how long a locked-out address stays locked out",
    shown="`900`",
)
LOGIN_FAILED_AUDIT_WINDOW_SECONDS = env_int(
    "LOGIN_FAILED_AUDIT_WINDOW_SECONDS",
    300,
    minimum=1,
    doc="a failed sign-in is audited once per address, username and this window (with a count)",
    shown="`300`",
)
LOGIN_FAILED_AUDIT_PER_MINUTE = env_int(
    "LOGIN_FAILED_AUDIT_PER_MINUTE",
    60,
    minimum=1,
    doc="at most this many failed-sign-in audit rows a minute",
    shown="`60`",
)
# django-axes counts failures in the default cache (Redis), so every replica sees them.
AXES_HANDLER = "axes.handlers.cache.AxesCacheHandler"
AXES_CACHE = "default"
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(seconds=LOGIN_LOCKOUT_SECONDS)
AXES_CLIENT_IP_CALLABLE = "core.client_ip.client_ip"
AXES_LOCKOUT_CALLABLE = "core.login_guard.lockout_response"
AXES_ENABLE_ADMIN = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

# Uploads stream to a temporary file past this size instead of memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = env_int(
    "FILE_UPLOAD_MAX_MEMORY_SIZE",
    2 * 1024 * 1024,
    minimum=0,
    doc="uploads stream to a temporary file past this size instead of memory",
    shown="2 MiB",
)
FILE_UPLOAD_TEMP_DIR = str(VAR_DIR / "uploads-tmp")
Path(FILE_UPLOAD_TEMP_DIR).mkdir(parents=True, exist_ok=True)
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
# Every non-multipart body (JSON API calls, forms, the token endpoint) is refused with 413 past
# this, before it is read (portal.body_limits); 10,000 direct-upload parts fit in well under it.
REQUEST_MAX_BODY_BYTES = env_int(
    "REQUEST_MAX_BODY_BYTES",
    1024 * 1024,
    minimum=64 * 1024,
    doc=(
        "body cap of every non-multipart request (413 before it is read); multipart uploads may be "
        "the adapter caps plus this"
    ),
    shown="1 MiB",
)

# --- security (production-like when DEBUG is off) ---
SECURE_SSL_REDIRECT = env_bool(
    "SECURE_SSL_REDIRECT",
    not DEBUG,
    doc="HTTPS hardening: redirect plain HTTP to HTTPS",
    shown="on when not debugging",
)
# Trusted only when configured ("X-Forwarded-Proto: https"), for a proxy that overwrites it.
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header(
    "SECURE_PROXY_SSL_HEADER",
    doc=(
        "e.g. `X-Forwarded-Proto: https`: trust the proxy's scheme header; only behind a proxy that "
        "overwrites it"
    ),
    shown="unset",
)
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_HSTS_SECONDS = env_int(
    "SECURE_HSTS_SECONDS",
    0 if DEBUG else 31536000,
    minimum=0,
    doc="HTTPS hardening: the HSTS header's max-age",
    shown="1 year when not debugging",
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SILENCED_SYSTEM_CHECKS = env_list(
    "SILENCED_SYSTEM_CHECKS",
    [],
    doc="comma-separated Django system checks to silence (e.g. a deploy warning you accepted)",
    shown="empty",
)
# /healthz is probed over plain HTTP by load balancers and the launcher.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

# --- REST API ---
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # A JSON body is an object (core/api/parsers.py); forms and multipart as DRF has them.
    "DEFAULT_PARSER_CLASSES": [
        "core.api.parsers.JsonObjectParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_METADATA_CLASS": "core.api.metadata.ApiMetadata",
    "EXCEPTION_HANDLER": "core.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "LoRA Portal API",
    "DESCRIPTION": "Registry, releases, fleet and audit for LoRA adapters on shared vLLM engines.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "ResidencyStateEnum": "workers.models.ResidencyState",
        "EvalRunStatusEnum": "evals.models.RunStatus",
        "VersionStatusEnum": "adapters.models.VersionStatus",
        "SloClassEnum": "tenants.models.SloClass",
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
# The API docs and schema are for signed-in users unless this opens them (portal/urls.py).
API_DOCS_PUBLIC = env_bool(
    "API_DOCS_PUBLIC",
    False,
    doc=(
        "serve `/api/docs/` and `/api/schema/` to anonymous callers (default: signed-in users only)"
    ),
    shown="`0`",
)

# --- Celery ---
CELERY_BROKER_URL = env_str(
    "CELERY_BROKER_URL", REDIS_URL, doc="Celery's broker", shown="`REDIS_URL`"
)
CELERY_RESULT_BACKEND = env_str(
    "CELERY_RESULT_BACKEND",
    REDIS_URL,
    doc="where Celery keeps task results (24 h)",
    shown="`REDIS_URL`",
)
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int(
    "CELERY_TASK_TIME_LIMIT", 3600, minimum=10, doc="hard limit per task", shown="`3600`"
)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
# The validation task's own limits (prefork workers enforce them): validation is one linear pass,
# so one upload cannot hold a worker for the hour other tasks get. At the soft limit the version is
# rejected (validation.timeout); a run killed at the hard limit counts as an attempt, and a version
# claimed again after VALIDATION_MAX_ATTEMPTS such runs is rejected (validation.attempts_exhausted).
VALIDATION_SOFT_TIME_LIMIT = env_int(
    "VALIDATION_SOFT_TIME_LIMIT",
    300,
    minimum=5,
    doc=(
        "seconds one validation run may take; then the version is rejected with `validation.timeout` "
        "(the hard limit is 30 s more)"
    ),
    shown="`300`",
)
VALIDATION_TIME_LIMIT = VALIDATION_SOFT_TIME_LIMIT + 30
VALIDATION_MAX_ATTEMPTS = env_int(
    "VALIDATION_MAX_ATTEMPTS",
    3,
    minimum=1,
    doc=(
        "runs killed without a verdict before the version is rejected with "
        "`validation.attempts_exhausted`"
    ),
    shown="`3`",
)
# Rejected versions' quarantine objects are deleted this long after the rejection (their bytes
# count against the tenant's storage quota until then).
QUARANTINE_RETENTION_DAYS = env_int(
    "QUARANTINE_RETENTION_DAYS",
    7,
    minimum=0,
    doc=(
        "a rejected version's quarantined files are purged this long after rejection (audited); "
        "until then they count against the tenant's storage quota"
    ),
    shown="`7`",
)
# With acks_late, Redis redelivers an unacked task after this long. It must exceed the longest
# task (staging a multi-GB adapter), or a slow task runs twice at once; the tasks are idempotent
# and claim their work with a conditional update, so a redelivery after a crash is harmless.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int(
        "CELERY_VISIBILITY_TIMEOUT",
        2 * 3600,
        minimum=60,
        doc="seconds before Redis redelivers an unacknowledged task; above the longest task",
        shown="`7200`",
    )
}
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_TASK_DEFAULT_QUEUE = env_str(
    "CELERY_TASK_DEFAULT_QUEUE",
    "portal",
    doc=(
        "the queue the portal's workers consume (engine nodes consume `ENGINE_QUEUE_PREFIX<engine>`)"
    ),
    shown="`portal`",
)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_ALWAYS_EAGER = env_bool(
    "CELERY_TASK_ALWAYS_EAGER",
    False,
    doc="run tasks in the calling process instead of a worker (tests and scripts only)",
    shown="`0`",
)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Synced into django-celery-beat's tables at beat start; operators edit them in the admin.
CELERY_BEAT_SCHEDULE = {
    "requeue-stalled-validations": {
        "task": "adapters.tasks.requeue_stalled_validations",
        "schedule": 300.0,
    },
    "probe-engines": {"task": "workers.tasks.probe_engines", "schedule": 30.0},
    "expire-direct-uploads": {"task": "adapters.tasks.expire_direct_uploads", "schedule": 600.0},
    "purge-rejected-quarantine": {
        "task": "adapters.tasks.purge_rejected_quarantine",
        "schedule": 3600.0,
    },
    "reconcile-fleet": {
        "task": "workers.tasks.reconcile_fleet",
        "schedule": float(
            env_int(
                "FLEET_RECONCILE_SECONDS",
                30,
                minimum=1,
                doc="reconcile period (every engine converged)",
                shown="`30`",
            )
        ),
    },
    "check-fleet-alarms": {"task": "workers.tasks.check_alarms", "schedule": 60.0},
    "check-canaries": {"task": "gateway.tasks.check_canaries", "schedule": 30.0},
    "persist-gateway-usage": {"task": "gateway.tasks.persist_usage", "schedule": 60.0},
    "checkpoint-audit-chain": {
        "task": "portal.tasks.checkpoint_audit_chain",
        "schedule": float(AUDIT_CHECKPOINT_SECONDS),
    },
}

# --- single sign-on (tenants/sso, docs/sso.md) ---
# OpenID Connect providers: [{"name", "issuer", "client_id", "client_secret_env", "label"?}].
OIDC_PROVIDERS = env_oidc_providers(
    "OIDC_PROVIDERS",
    doc=(
        "single sign-on: a JSON list of OpenID Connect providers (`name`, `issuer`, `client_id`, "
        "`client_secret_env`, `label`?, `scopes`?, `cli_client_id`?), docs/sso.md"
    ),
    shown="`[]`",
)
# A signed-in SSO session is re-checked against its provider (a refresh) when its ID token
# expires, and at least this often: the longest a person disabled at the provider keeps a session.
SSO_RECHECK_SECONDS = env_int(
    "SSO_RECHECK_SECONDS",
    300,
    minimum=1,
    doc=(
        "an SSO session is re-checked against its provider at its ID token's expiry and at least "
        "this often: the longest a person disabled there keeps a session"
    ),
)
# People who use API tokens only are re-checked by beat on the same period (docs/sso.md).
CELERY_BEAT_SCHEDULE["recheck-sso-token-holders"] = {
    "task": "tenants.tasks.recheck_sso_token_holders",
    "schedule": float(SSO_RECHECK_SECONDS),
}
SSO_HTTP_TIMEOUT = env_int(
    "SSO_HTTP_TIMEOUT",
    10,
    minimum=1,
    doc="seconds to wait for an identity provider (discovery, token and key endpoints)",
)
SSO_ALERT_SECONDS = env_int(
    "SSO_ALERT_SECONDS",
    3600,
    minimum=60,
    doc=(
        "a provider that refuses the portal's client (its secret, its registration) is reported "
        "to the platform admins (audit event and e-mail) at most once per this many seconds"
    ),
)
SSO_LOCAL_PASSWORDS = env_bool(
    "SSO_LOCAL_PASSWORDS",
    True,
    doc="`0`: nobody signs in with a local password but the break-glass admin",
)
SSO_BREAK_GLASS_ADMIN = env_str(
    "SSO_BREAK_GLASS_ADMIN",
    "",
    doc="the one username that may still sign in with a local password when `SSO_LOCAL_PASSWORDS` is 0",
)

# --- tenant notifications: e-mail and signed webhooks (tenants/notifications, docs/notifications.md) ---
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend",
    doc="Django's e-mail backend for notifications (`...console.EmailBackend` prints them)",
    shown="SMTP",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost", doc="SMTP server that sends notification e-mail")
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "", doc="SMTP user name (empty: no login)")
EMAIL_HOST_PASSWORD = env_str(
    "EMAIL_HOST_PASSWORD", "", doc="SMTP password (a secret)", shown="empty"
)
# Encrypted by default: STARTTLS unless implicit TLS is asked for (Django refuses both at once).
# Plain SMTP is for a relay on this host; `check --deploy` refuses it to any other
# (tenants/checks.py).
EMAIL_USE_SSL = env_bool(
    "EMAIL_USE_SSL", False, doc="implicit TLS to the SMTP server (port 465)", shown="`0`"
)
EMAIL_USE_TLS = env_bool(
    "EMAIL_USE_TLS",
    not EMAIL_USE_SSL,
    doc="STARTTLS to the SMTP server; `0` with `EMAIL_USE_SSL` 0 is plain SMTP, for a relay on "
    "this host only",
    shown="`1` (`0` with `EMAIL_USE_SSL`)",
)
EMAIL_PORT = env_int(
    "EMAIL_PORT",
    465 if EMAIL_USE_SSL else 587,
    minimum=1,
    doc="its port",
    shown="`587` (`465` with `EMAIL_USE_SSL`)",
)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1, doc="seconds to wait for the SMTP server")
DEFAULT_FROM_EMAIL = env_str(
    "DEFAULT_FROM_EMAIL",
    "LoRA Portal <lora-portal@localhost>",
    doc="the sender of notification e-mail",
    shown="`lora-portal@localhost`",
)
SERVER_EMAIL = DEFAULT_FROM_EMAIL
WEBHOOK_ALLOW_PRIVATE_ADDRESSES = env_bool(
    "WEBHOOK_ALLOW_PRIVATE_ADDRESSES",
    False,
    doc=(
        "let webhooks post to private, loopback and link-local addresses (a lab or an internal "
        "receiver); off, such URLs are refused when saved and at every send"
    ),
    shown="`0`",
)
WEBHOOK_TIMEOUT_SECONDS = env_int(
    "WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1, doc="seconds a webhook receiver has to answer"
)
NOTIFY_MAX_ATTEMPTS = env_int(
    "NOTIFY_MAX_ATTEMPTS",
    8,
    minimum=1,
    doc="attempts per notification e-mail or webhook post before it is marked failed",
)
NOTIFY_RETRY_BASE_SECONDS = env_int(
    "NOTIFY_RETRY_BASE_SECONDS",
    30,
    minimum=1,
    doc="wait before the second attempt of a failed delivery; it doubles at each further one",
)
# Budgets' thresholds are checked by a loop (budgets/alerts.py): each one crossed in a window is
# told once, however often it runs and on however many workers.
CELERY_BEAT_SCHEDULE["send-budget-alerts"] = {
    "task": "budgets.tasks.send_budget_alerts",
    "schedule": float(
        env_int(
            "BUDGET_ALERT_SECONDS",
            30,
            minimum=1,
            doc="how often budgets' thresholds are checked (an alert goes out within this time)",
        )
    ),
}
# Budgets' burn-down samples and delivered notifications are kept this long, then pruned by a
# beat task (budgets/retention.py); never a month window's still running, nor the notice that
# keeps a running window's alert from being told twice.
BUDGET_HISTORY_RETENTION_DAYS = env_int(
    "BUDGET_HISTORY_RETENTION_DAYS",
    90,
    minimum=32,
    doc=(
        "budgets' burn-down samples and delivered notifications older than this are pruned "
        "(hourly); at least 32, longer than a month's window"
    ),
)
CELERY_BEAT_SCHEDULE["prune-budget-history"] = {
    "task": "budgets.tasks.prune_budget_history",
    "schedule": 3600.0,
}
CELERY_BEAT_SCHEDULE["requeue-stalled-deliveries"] = {
    "task": "tenants.notifications.requeue_stalled",
    "schedule": 300.0,
}

# --- Channels ---
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # channels_redis waits for messages with a 5 s blocking pop; redis-py's default
            # socket timeout is also 5 s, which killed sockets idle for that long (an events
            # socket between two events). Reads may now block longer than the pop.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "prefix": env_str(
                "CHANNELS_PREFIX",
                "lp-asgi",
                doc=(
                    "prefix of the Channels layers' keys in Redis (the live numbers' layer adds "
                    "`-live-<database>`)"
                ),
                shown="`lp-asgi`",
            ),
        },
    },
    # The live numbers (portal/live_publisher.py): Redis pub/sub, one PUBLISH per group and
    # second reaching every portal process, which hands it to its own sockets. At most once,
    # which suits numbers replaced a second later (bench/live_fanout.py measures both layers).
    "live": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [{"address": REDIS_URL}],
            "prefix": env_str("CHANNELS_PREFIX", "lp-asgi") + f"-live-{REDIS_PUBSUB_SCOPE}",
        },
    },
}

# Websockets one user may hold open in one portal process (core.socket_base); more close 4429.
PORTAL_MAX_SOCKETS_PER_USER = env_int(
    "PORTAL_MAX_SOCKETS_PER_USER",
    32,
    minimum=1,
    doc="websockets one user may hold open in one portal process; more are closed with 4429",
    shown="`32`",
)

# --- adapter storage ---
ADAPTER_STORAGE_BACKEND = env_choice(
    "ADAPTER_STORAGE_BACKEND", "local", ("local", "s3"), doc="`local` or `s3`", shown="`local`"
)
ADAPTER_STORAGE_ROOT = env_str(
    "ADAPTER_STORAGE_ROOT",
    str(VAR_DIR / "storage"),
    doc="root of the local backend",
    shown="`var/storage`",
)
S3_BUCKET = env_str(
    "S3_BUCKET", "", doc="the bucket of the S3 (or S3-compatible) store", shown="empty"
)
S3_ENDPOINT_URL = env_str(
    "S3_ENDPOINT_URL", "", doc="the store's endpoint, for an S3-compatible server", shown="empty"
)
S3_REGION = env_str("S3_REGION", "us-east-1", doc="the store's region", shown="`us-east-1`")
S3_ACCESS_KEY_ID = env_str(
    "S3_ACCESS_KEY_ID",
    "",
    doc="the store's access key; both keys or neither (then the AWS credential chain)",
    shown="empty",
)
S3_SECRET_ACCESS_KEY = env_str(
    "S3_SECRET_ACCESS_KEY",
    "",
    doc="the store's secret key; both keys or neither (then the AWS credential chain)",
    shown="empty",
)
# audit/ holds the audit chain's checkpoints (portal.audit_checkpoint).
S3_ALLOWED_PREFIXES = env_list(
    "S3_ALLOWED_PREFIXES",
    ["quarantine/", "serving/", "audit/"],
    doc="the only key prefixes the portal writes (`audit/`: the audit chain's checkpoints)",
    shown="`quarantine/",
)
# The host name clients reach the store by in presigned (direct upload) URLs, if not S3_ENDPOINT_URL.
S3_PRESIGN_ENDPOINT_URL = env_str(
    "S3_PRESIGN_ENDPOINT_URL",
    "",
    doc="host name clients use for presigned part URLs, when it differs from `S3_ENDPOINT_URL`",
    shown="empty",
)
if ADAPTER_STORAGE_BACKEND == "s3" and not S3_BUCKET:
    raise SettingError("S3_BUCKET is required when ADAPTER_STORAGE_BACKEND=s3")
ADAPTER_MAX_MODEL_BYTES = env_int(
    "ADAPTER_MAX_MODEL_BYTES",
    4 * 1024**3,
    minimum=1,
    doc="an upload's weights file cap",
    shown="4 GiB",
)
ADAPTER_MAX_CONFIG_BYTES = env_int(
    "ADAPTER_MAX_CONFIG_BYTES",
    64 * 1024,
    minimum=1,
    doc="an upload's adapter_config.json cap",
    shown="64 KiB",
)
# Direct-to-S3 uploads: how long the presigned part URLs (and the pending upload) stay valid, and
# the default part size (S3 allows 5 MiB..5 GiB per part, at most 10,000 parts).
DIRECT_UPLOAD_EXPIRES_SECONDS = env_int(
    "DIRECT_UPLOAD_EXPIRES_SECONDS",
    6 * 3600,
    minimum=60,
    doc="direct-to-S3 uploads: lifetime of the part URLs and of the pending upload",
    shown="6 h",
)
DIRECT_UPLOAD_PART_SIZE = env_int(
    "DIRECT_UPLOAD_PART_SIZE",
    64 * 1024**2,
    minimum=5 * 1024**2,
    doc="direct-to-S3 uploads: the default part size",
    shown="64 MiB",
)

# --- fleet ---
# Development only (DEBUG): one key for engines missing from PORTAL_ENGINE_KEYS. Ignored with
# DEBUG off, where a deploy check refuses it (workers/checks.py): each engine has its own key.
PORTAL_ENGINE_KEY = env_str(
    "PORTAL_ENGINE_KEY",
    "",
    doc=(
        "development only (`DJANGO_DEBUG=1`): one key for engines not in `PORTAL_ENGINE_KEYS`; "
        "ignored otherwise (deploy check `workers.E001`)"
    ),
    shown="empty",
)
# Used for validation when no engine of the base model is registered yet.
DEFAULT_MAX_LORA_RANK = env_int(
    "DEFAULT_MAX_LORA_RANK",
    64,
    minimum=1,
    doc="validation's rank cap when no engine serves the base model yet",
    shown="`64`",
)
ENGINE_ADAPTER_ROOT = env_str(
    "ENGINE_ADAPTER_ROOT",
    str(VAR_DIR / "engine-adapters"),
    doc="where workers stage adapters on a node (the demo)",
    shown="`var/engine-adapters`",
)
ENGINE_HTTP_TIMEOUT = env_float(
    "ENGINE_HTTP_TIMEOUT",
    60.0,
    doc="seconds the workers wait for an engine's management call (load, unload, models)",
    shown="`60`",
)
HEALTHZ_ENGINE_TIMEOUT = env_float(
    "HEALTHZ_ENGINE_TIMEOUT", 2.0, doc="seconds `/healthz` waits for each engine", shown="`2`"
)
# The prober's one-token request (workers.services.probe_progress): an engine that neither
# finishes it in this time nor processes any token meanwhile is stuck, and is marked down.
ENGINE_PROGRESS_TIMEOUT_SECONDS = env_float(
    "ENGINE_PROGRESS_TIMEOUT_SECONDS",
    10.0,
    doc=(
        "the prober's one-token request: an engine that neither finishes it in this time nor "
        "processes any token meanwhile is stuck, and is marked down"
    ),
    shown="`10`",
)
HEALTHZ_CELERY_TIMEOUT = env_float(
    "HEALTHZ_CELERY_TIMEOUT",
    1.0,
    doc="seconds `/healthz` waits for a Celery worker's ping",
    shown="`1`",
)
# Anonymous /healthz answers from a result at most this old (portal.health): a flood of probes
# costs one check per period, not a Celery ping and an engine probe each. Operators get a fresh one.
HEALTHZ_CACHE_SECONDS = env_float(
    "HEALTHZ_CACHE_SECONDS",
    5.0,
    doc=(
        "anonymous `/healthz` answers from a result at most this old, so a flood of probes costs one "
        "check per period; operators get a fresh one"
    ),
    shown="`5`",
)
# Per-engine keys as JSON {"engine-name": "key"}: an engine's key goes only to that engine (as
# its bearer token and X-Portal-Engine-Key); the portal calls no engine missing here (debug aside).
PORTAL_ENGINE_KEYS = env_json_object(
    "PORTAL_ENGINE_KEYS",
    {},
    doc='JSON `{"engine-name": "key"}`: each engine\'s own key, sent only to it',
    shown="`{}`",
)
# A key goes to an engine over plain HTTP only on loopback, unless this trusts the network
# (workers.vllm_client.plaintext_key_refusal).
ENGINE_ALLOW_PLAINTEXT_KEY = env_bool(
    "ENGINE_ALLOW_PLAINTEXT_KEY",
    False,
    doc=(
        "allow engine keys over plain HTTP to engines not on loopback (a private network you trust)"
    ),
    shown="`0`",
)
# Each engine node's worker consumes "<prefix><engine name>" (staging and the engine's controller).
ENGINE_QUEUE_PREFIX = env_str(
    "ENGINE_QUEUE_PREFIX",
    "engine.",
    doc="an engine node's worker consumes `<prefix><engine name>`",
    shown="`engine.`",
)
DEFAULT_POOL = env_str(
    "DEFAULT_POOL", "shared", doc="the pool of adapters and tenants bound to none", shown="`shared`"
)
# The reconcile period (beat) and the lease of the per-engine controller lock.
FLEET_RECONCILE_SECONDS = env_int("FLEET_RECONCILE_SECONDS", 30, minimum=1)
FLEET_LOCK_LEASE_SECONDS = env_int(
    "FLEET_LOCK_LEASE_SECONDS",
    120,
    minimum=5,
    doc="the fleet controller's lock lease",
    shown="`120`",
)
# An engine found down or not answering is probed again this often until it answers, so that its
# recovery starts within this of its return, not at the next reconcile tick (0: ticks only).
FLEET_DOWN_PROBE_SECONDS = env_float(
    "FLEET_DOWN_PROBE_SECONDS",
    2.0,
    doc=(
        "an engine found down or not answering is probed this often until it answers, so its "
        "recovery starts within this of its return"
    ),
    shown="`2`",
)
# How long a caller waits for another's load of the same version (single-flight).
FLEET_LOAD_WAIT_SECONDS = env_float(
    "FLEET_LOAD_WAIT_SECONDS",
    120.0,
    doc="how long a request for a version no engine holds waits for its load",
    shown="`120`",
)
# Staged copies no engine has registered are deleted after this long on the node.
# The cache policy pins hot versions on its own (within tenant pin quotas and the hard rules).
FLEET_AUTO_PINS = env_bool(
    "FLEET_AUTO_PINS",
    True,
    doc="the cache policy pins hot versions itself (within quotas and the hard rules)",
    shown="`1`",
)
# Anti-thrash: a pin the policy placed is not moved for this long (a version disabled, unreleased
# or no longer wanted on the engine is unpinned at once). Under load the policy moved a pin about
# once a second.
FLEET_PIN_MIN_HOLD_SECONDS = env_float(
    "FLEET_PIN_MIN_HOLD_SECONDS",
    30.0,
    doc=(
        "anti-thrash: a pin the policy placed is not moved for this long (a version no longer wanted "
        "on the engine is unpinned at once)"
    ),
    shown="`30`",
)
FLEET_STAGING_GRACE_SECONDS = env_int(
    "FLEET_STAGING_GRACE_SECONDS",
    3600,
    minimum=0,
    doc="staged copies no engine holds are deleted after this",
    shown="`3600`",
)
# Thrash alarm: loads + evictions per minute on one engine, sustained over the window.
FLEET_THRASH_PER_MINUTE = env_float(
    "FLEET_THRASH_PER_MINUTE",
    30.0,
    doc="thrash alarm: loads and evictions per minute sustained over `FLEET_THRASH_WINDOW_SECONDS`",
    shown="`30`",
)
FLEET_THRASH_WINDOW_SECONDS = env_int(
    "FLEET_THRASH_WINDOW_SECONDS", 300, minimum=60, doc="the thrash alarm's window", shown="`300`"
)

# --- gateway (/v1/) ---
# Replicas re-read their tables when a change message arrives (gateway.invalidation); this is
# the longest they trust them without one (0: check the Redis counters on every request).
GATEWAY_REFRESH_SECONDS = env_float(
    "GATEWAY_REFRESH_SECONDS",
    5.0,
    doc=(
        "a replica re-reads its tables when a change message arrives (Redis pub/sub); this is the "
        "longest it trusts them without one (0: check on every request)"
    ),
    shown="`5`",
)
GATEWAY_MAX_BODY_BYTES = env_int(
    "GATEWAY_MAX_BODY_BYTES",
    2 * 1024 * 1024,
    minimum=1024,
    doc="request body cap on `/v1/`",
    shown="2 MiB",
)
# An engine that failed a request gets no traffic from this replica until the fleet has seen it
# answer again (the replica asks for a probe at once), at most this long.
GATEWAY_ENGINE_COOLDOWN_SECONDS = env_float(
    "GATEWAY_ENGINE_COOLDOWN_SECONDS",
    10.0,
    doc=(
        "an engine that failed a request gets no traffic from that replica until the fleet has seen "
        "it answer again (the replica asks for a probe at once), at most this long"
    ),
    shown="`10`",
)
# A request whose load every engine refused for room (every slot serving requests) waits up to
# this long for a slot, asking again in growing rounds, before its 503 engine_busy.
GATEWAY_LOAD_ROOM_WAIT_SECONDS = env_float(
    "GATEWAY_LOAD_ROOM_WAIT_SECONDS",
    30.0,
    doc=(
        "a request whose adapter load every engine refused for room (every slot serving requests) "
        "waits this long for a slot, asking again in growing rounds, before its 503 `engine_busy` "
        "(with `Retry-After`)"
    ),
    shown="`30`",
)
# Requests a replica sends one engine at once, as a multiple of its --max-num-seqs; beyond it
# they wait in per-tenant queues admitted round-robin (gateway/fairness.py).
GATEWAY_ENGINE_SLOTS_FACTOR = env_float(
    "GATEWAY_ENGINE_SLOTS_FACTOR",
    1.0,
    doc=(
        "sequences one replica sends an engine at once, times its `--max-num-seqs`; the rest wait in "
        "fair per-tenant queues (a request takes as many slots as sequences it runs)"
    ),
    shown="`1.0`",
)
# Service classes at the gateway (docs/classes.md): weighted fair shares of a saturated engine
# by class across replicas, shedding, and each request's engine priority from its class.
GATEWAY_SERVICE_CLASSES = env_bool(
    "GATEWAY_SERVICE_CLASSES",
    True,
    doc=(
        "service classes decide who waits and who is shed on a saturated engine (weighted fair "
        "shares across replicas) and set each request's engine priority; off: fair sharing "
        "between tenants only, engines' first come first served"
    ),
    shown="`1`",
)
# Slots of each engine that only service classes that may not be shed (gold) take, across
# replicas in the admission script (docs/classes.md): a gold request finds a free slot at once.
GATEWAY_CLASS_HEADROOM = env_int(
    "GATEWAY_CLASS_HEADROOM",
    2,
    minimum=0,
    doc=(
        "an engine's slots that only service classes that may not be shed (gold) take, across "
        "replicas: a sheddable class fills the engine only up to its slots less these"
    ),
)
# Slots of each engine that background requests (eval runs) leave free for live ones, counted
# across every replica in the admission script (docs/decisions/0011-live-headroom.md).
GATEWAY_LIVE_HEADROOM = env_int(
    "GATEWAY_LIVE_HEADROOM",
    6,
    minimum=0,
    doc=(
        "an engine's slots that background requests (eval runs) leave free for live requests, "
        "across replicas: a background request waits while it would take one of them"
    ),
)
# How often a replica reads where background sequences run (gateway/lanes.py): live requests keep
# off those engines (docs/decisions/0012-live-and-background-keep-apart.md).
GATEWAY_LANE_POLL_SECONDS = env_float(
    "GATEWAY_LANE_POLL_SECONDS",
    0.25,
    doc=(
        "how often a gateway replica reads which engines run background requests (eval runs), "
        "which its live requests keep off while another engine serves them as well"
    ),
    shown="`0.25`",
)
# A request that runs longer than this at its engine is aborted there (the connection is closed)
# and answered 504; the engine is not blamed.
GATEWAY_REQUEST_TIMEOUT_SECONDS = env_float(
    "GATEWAY_REQUEST_TIMEOUT_SECONDS",
    120.0,
    doc=(
        "a request's time budget: past it, it is aborted at the engine (connection closed) and "
        "answered 504 `request_timeout`; the engine is not blamed"
    ),
    shown="`120`",
)
# How often a replica sends its measurements (counters, latency sums, demand) to Redis; what
# it holds at SIGTERM is sent by its orderly stop (portal.asgi's lifespan).
GATEWAY_RELEASE_SAMPLES_BUFFER = env_int(
    "GATEWAY_RELEASE_SAMPLES_BUFFER",
    1000,
    minimum=1,
    doc=(
        "live answers a gateway replica holds for release plans' live checks between two sends "
        "to Redis; a sample that finds the buffer full is dropped, never waited for"
    ),
)
GATEWAY_RELEASE_SAMPLE_MAX_BYTES = env_int(
    "GATEWAY_RELEASE_SAMPLE_MAX_BYTES",
    65536,
    minimum=1024,
    doc="a sampled reply longer than this is not kept for the live checks (it is not scored)",
)
GATEWAY_MEASUREMENT_FLUSH_SECONDS = env_float(
    "GATEWAY_MEASUREMENT_FLUSH_SECONDS",
    1.0,
    doc=(
        "how often a gateway replica sends its measurements (counters, latency sums, demand) to "
        "Redis; what it holds at SIGTERM is sent by its orderly stop"
    ),
    shown="`1`",
)
# Ended requests' budget settles wait this long to share one database write and one Redis round
# trip (gateway/budgets.py): their reservations are held that much longer, never less.
GATEWAY_BUDGET_SETTLE_SECONDS = env_float(
    "GATEWAY_BUDGET_SETTLE_SECONDS",
    0.25,
    doc=(
        "how long a gateway replica gathers ended requests' budget settles into one batch (one "
        "database transaction, one Redis round trip); their reservations are held until then"
    ),
    shown="`0.25`",
)
# A stream whose caller takes no bytes for this long is aborted at the engine, its slots freed.
GATEWAY_WRITE_DEADLINE_SECONDS = env_float(
    "GATEWAY_WRITE_DEADLINE_SECONDS",
    10.0,
    doc=(
        "a stream whose caller takes no bytes this long is aborted at the engine and its slots "
        "released"
    ),
    shown="`10`",
)
# The gateway waits at most this long for one Redis command; when Redis is away (stalled,
# restarting) a request is answered 503 `limits_unavailable` rather than admitted unchecked.
GATEWAY_REDIS_TIMEOUT_SECONDS = env_float(
    "GATEWAY_REDIS_TIMEOUT_SECONDS",
    2.0,
    doc=(
        "the longest the gateway waits for one Redis command; while Redis is away requests get 503 "
        "`limits_unavailable` (fail closed, docs/reliability.md)"
    ),
    shown="`2`",
)
# Requests a second one client address may send /v1/ (bursts of GATEWAY_ADDRESS_BURST), checked
# before its token is looked at: past it, 429 `too_many_requests_from_address` with Retry-After
# (gateway.address_limit; per replica; the address as core.client_ip reads it). 0: no limit.
GATEWAY_ADDRESS_RATE_PER_SECOND = env_float(
    "GATEWAY_ADDRESS_RATE_PER_SECOND",
    100.0,
    doc=(
        "requests a second one client address may send `/v1/`, checked before its token is looked "
        "at: past it 429 `address_rate_limited` with Retry-After; per replica, the address as "
        "`TRUSTED_PROXY_COUNT` reads it, IPv6 per /64; `0` turns it off"
    ),
    shown="`100`",
)
GATEWAY_ADDRESS_BURST = env_int(
    "GATEWAY_ADDRESS_BURST",
    200,
    minimum=1,
    doc="the per-address limit's burst (requests above the rate one address may send at once)",
    shown="`200`",
)
# Redis connections per gateway process; a request waits (up to the timeout above) for a free
# one rather than fail: redis-py's default pool raised "Too many connections" past 100 under a
# 200-client burst (make bench-load).
GATEWAY_REDIS_MAX_CONNECTIONS = env_int(
    "GATEWAY_REDIS_MAX_CONNECTIONS",
    64,
    doc=(
        "Redis connections per gateway process; past them a request waits for a free one (at most "
        "`GATEWAY_REDIS_TIMEOUT_SECONDS`, then 503 `limits_unavailable`)"
    ),
    shown="`64`",
)
# An engine counts as shared while another tenant asked it within this many seconds: then no
# tenant holds more than 3/4 of its slots, nor sends it a request heavier than that
# (gateway/fairness.py).
GATEWAY_FAIR_SHARED_WINDOW_SECONDS = env_float(
    "GATEWAY_FAIR_SHARED_WINDOW_SECONDS",
    60.0,
    doc=(
        "an engine is shared while another tenant used it within this window: one tenant then holds "
        "at most 3/4 of its slots, and a request heavier than that waits (429 `fair_share_exceeded` "
        "after its budget)"
    ),
    shown="`60`",
)
# Test and benchmark setting: a file holding seconds added to the clock that budgets' windows
# are read at (budgets.clock), so a gateway in another process crosses a window's boundary when
# a test says. Whoever could write that file would move every tenant's resets: these settings
# refuse it, and only the test settings (tests/settings.py, which the benchmarks use too) take it.
BUDGET_CLOCK_OFFSET_FILE = env_str(
    "BUDGET_CLOCK_OFFSET_FILE",
    "",
    doc=(
        "the test settings only (`tests/settings.py`; these settings refuse it): a file holding "
        "an offset in seconds added to the clock that budgets' windows are read at "
        "(docs/budgets.md); unset, the system clock"
    ),
    shown="unset",
)
if BUDGET_CLOCK_OFFSET_FILE:
    raise SettingError(
        "BUDGET_CLOCK_OFFSET_FILE moves the clock budgets reset by; only the test settings "
        "(DJANGO_SETTINGS_MODULE=tests.settings) accept it"
    )
# Each replica renews a lease this long (every quarter of it); a replica whose lease lapsed (it
# died) has what its requests held in the shared counts given back by the others (gateway.replicas).
GATEWAY_REPLICA_LEASE_SECONDS = env_float(
    "GATEWAY_REPLICA_LEASE_SECONDS",
    10.0,
    doc=(
        "a gateway replica's lease on its holds in the shared counts (in-flight, concurrency); a "
        "replica that died has them given back by the others within a lease and a quarter "
        "(docs/reliability.md)"
    ),
    shown="`10`",
)
# The per-request bounds a new tenant's plan starts with (tenants.plan): platform admins set these
# defaults here and each tenant's own values on its plan (API, pages).
GATEWAY_PLAN_DEFAULTS = {
    "max_in_flight_requests": env_int(
        "GATEWAY_PLAN_MAX_IN_FLIGHT",
        64,
        minimum=1,
        doc=(
            "the per-request bound a new tenant's plan starts with (`tenants/plan.py`); platform "
            "admins change each tenant's own on its plan (API `PATCH /api/v1/tenants/{t}/`, the "
            "platform tenant page)"
        ),
        shown="`64`",
    ),
    "max_n": env_int(
        "GATEWAY_PLAN_MAX_N",
        8,
        minimum=1,
        doc=(
            "the per-request bound a new tenant's plan starts with (`tenants/plan.py`); platform "
            "admins change each tenant's own on its plan (API `PATCH /api/v1/tenants/{t}/`, the "
            "platform tenant page)"
        ),
        shown="`8`",
    ),
    "max_prompts": env_int(
        "GATEWAY_PLAN_MAX_PROMPTS",
        16,
        minimum=1,
        doc=(
            "the per-request bound a new tenant's plan starts with (`tenants/plan.py`); platform "
            "admins change each tenant's own on its plan (API `PATCH /api/v1/tenants/{t}/`, the "
            "platform tenant page)"
        ),
        shown="`16`",
    ),
    "max_tokens": env_int(
        "GATEWAY_PLAN_MAX_TOKENS",
        4096,
        minimum=1,
        doc=(
            "the per-request bound a new tenant's plan starts with (`tenants/plan.py`); platform "
            "admins change each tenant's own on its plan (API `PATCH /api/v1/tenants/{t}/`, the "
            "platform tenant page)"
        ),
        shown="`4096`",
    ),
    "max_logprobs": env_int(
        "GATEWAY_PLAN_MAX_LOGPROBS",
        20,
        minimum=1,
        doc=(
            "the per-request bound a new tenant's plan starts with (`tenants/plan.py`); platform "
            "admins change each tenant's own on its plan (API `PATCH /api/v1/tenants/{t}/`, the "
            "platform tenant page)"
        ),
        shown="`20`",
    ),
    "max_prompt_logprobs": env_int(
        "GATEWAY_PLAN_MAX_PROMPT_LOGPROBS",
        5,
        minimum=1,
        doc=(
            "the per-request bound a new tenant's plan starts with (`tenants/plan.py`); platform "
            "admins change each tenant's own on its plan (API `PATCH /api/v1/tenants/{t}/`, the "
            "platform tenant page)"
        ),
        shown="`5`",
    ),
    "max_prompt_bytes": env_int(
        "GATEWAY_PLAN_MAX_PROMPT_BYTES",
        256 * 1024,
        minimum=1,
        doc=(
            "the per-request bound a new tenant's plan starts with (`tenants/plan.py`); platform "
            "admins change each tenant's own on its plan (API `PATCH /api/v1/tenants/{t}/`, the "
            "platform tenant page)"
        ),
        shown="256 KiB",
    ),
    "max_structured_output_bytes": env_int(
        "GATEWAY_PLAN_MAX_STRUCTURED_BYTES",
        16384,
        minimum=1,
        doc=(
            "the per-request bound a new tenant's plan starts with (`tenants/plan.py`); platform "
            "admins change each tenant's own on its plan (API `PATCH /api/v1/tenants/{t}/`, the "
            "platform tenant page)"
        ),
        shown="16 KiB",
    ),
}

# A new tenant's eval-suite bounds (tenants/plan.py EVAL_BOUNDS); platform admins change them per
# tenant. A suite is uploaded as one multipart body, so its bytes stay under REQUEST_MAX_BODY_BYTES.
EVAL_PLAN_DEFAULTS = {
    "eval_max_cases": env_int(
        "EVAL_PLAN_MAX_CASES",
        1000,
        minimum=1,
        doc=(
            "the eval-suite bounds a new tenant's plan starts with (cases per suite, bytes per suite "
            "file, max_tokens per case; docs/evals.md); changed per tenant like the other plan bounds"
        ),
        shown="`1000`",
    ),
    "eval_max_suite_bytes": env_int(
        "EVAL_PLAN_MAX_SUITE_BYTES",
        512 * 1024,
        minimum=1,
        doc=(
            "the eval-suite bounds a new tenant's plan starts with (cases per suite, bytes per suite "
            "file, max_tokens per case; docs/evals.md); changed per tenant like the other plan bounds"
        ),
        shown="512 KiB",
    ),
    "eval_max_case_tokens": env_int(
        "EVAL_PLAN_MAX_CASE_TOKENS",
        256,
        minimum=1,
        doc=(
            "the eval-suite bounds a new tenant's plan starts with (cases per suite, bytes per suite "
            "file, max_tokens per case; docs/evals.md); changed per tenant like the other plan bounds"
        ),
        shown="`256`",
    ),
}
# An eval run's requests in flight at once (each within the tenant's in-flight cap, at a
# priority live traffic beats), and the seed every case is asked with (temperature 0).
EVAL_RUN_CONCURRENCY = env_int(
    "EVAL_RUN_CONCURRENCY",
    4,
    minimum=1,
    doc=(
        "requests one eval run sends at once (each side, the judge's too), and at most half "
        "the tenant's in-flight cap"
    ),
)
EVAL_RUN_SEED = env_int(
    "EVAL_RUN_SEED",
    1234,
    minimum=0,
    doc="the sampling seed of every eval request (temperature 0 too), so a run can be repeated",
)
# A run's worker marks it alive this often; a run whose mark is older than the stale time (its
# worker killed, its node gone) is queued again by beat and a new worker takes it up, skipping
# every case already recorded (evals.services.runner).
EVAL_RUN_HEARTBEAT_SECONDS = env_int(
    "EVAL_RUN_HEARTBEAT_SECONDS",
    10,
    minimum=1,
    doc="how often the worker running an eval run marks it alive",
)
EVAL_RUN_CLAIM_STALE_SECONDS = env_int(
    "EVAL_RUN_CLAIM_STALE_SECONDS",
    60,
    minimum=2,
    doc=(
        "an eval run not marked alive for this long (its worker died) is queued again by beat "
        "and resumed by another worker, each recorded case kept; above the heartbeat"
    ),
)
if EVAL_RUN_CLAIM_STALE_SECONDS <= EVAL_RUN_HEARTBEAT_SECONDS:
    raise SettingError(
        "EVAL_RUN_CLAIM_STALE_SECONDS must exceed EVAL_RUN_HEARTBEAT_SECONDS: a live run would "
        "be taken from its worker."
    )
# An eval run's asking runs in a thread of its own at a lower CPU priority (Linux nice, per
# thread; the threads it starts inherit it): where a worker shares cores with the gateway and the
# engines, live requests win the CPU the run would take (evals.services.runner).
EVAL_RUN_NICE = env_int(
    "EVAL_RUN_NICE",
    19,
    minimum=0,
    doc=(
        "how much lower the CPU priority of an eval run's asking is than its worker's (Linux "
        "nice, 0-19; 0: the same)"
    ),
)
CELERY_BEAT_SCHEDULE["requeue-stale-eval-runs"] = {
    "task": "evals.tasks.requeue_stale_eval_runs",
    "schedule": max(1.0, EVAL_RUN_CLAIM_STALE_SECONDS / 2),
}
RELEASE_TICK_SECONDS = env_int(
    "RELEASE_TICK_SECONDS",
    10,
    minimum=1,
    doc="how often beat judges every running release plan's step (docs/releases.md)",
)
CELERY_BEAT_SCHEDULE["release-plans-tick"] = {
    "task": "evals.tasks.release_plans_tick",
    "schedule": float(RELEASE_TICK_SECONDS),
}
CELERY_BEAT_SCHEDULE["delete-expired-release-samples"] = {
    "task": "evals.tasks.delete_expired_release_samples",
    "schedule": 3600.0,
}
CELERY_BEAT_SCHEDULE["score-release-samples"] = {
    "task": "evals.tasks.score_release_samples",
    "schedule": max(1.0, RELEASE_TICK_SECONDS / 2),
}
RELEASE_SHADOW_SECONDS = env_float(
    "RELEASE_SHADOW_SECONDS",
    2.0,
    doc="how often a worker asks the candidate of a plan in a shadow step the stable's sampled "
    "requests (docs/releases.md, shadow pairs)",
)
CELERY_BEAT_SCHEDULE["ask-shadow-pairs"] = {
    "task": "evals.tasks.ask_shadow_pairs",
    "schedule": RELEASE_SHADOW_SECONDS,
}
RELEASE_SHADOW_BACKLOG = env_int(
    "RELEASE_SHADOW_BACKLOG",
    32,
    minimum=1,
    doc="the most sampled stable requests waiting for the shadow worker; one more is skipped "
    "(counted as `backlog`), never queued",
)
RELEASE_SHADOW_BATCH = env_int(
    "RELEASE_SHADOW_BATCH",
    4,
    minimum=1,
    doc="shadow pairs one pass of the shadow worker asks at once (each also within the "
    "background lane's room and the tenant's eval bound)",
)
RELEASE_SHADOW_MAX_AGE_SECONDS = env_float(
    "RELEASE_SHADOW_MAX_AGE_SECONDS",
    30.0,
    doc="a sampled stable request older than this when the shadow worker takes it is skipped "
    "(counted as `stale`)",
)
RELEASE_SHADOW_BUDGET_RESERVE = env_float(
    "RELEASE_SHADOW_BUDGET_RESERVE",
    0.10,
    doc="share of each budget's window a shadow pair leaves to live traffic: a pair is asked "
    "only while every budget that applies has its worst case left above this share",
)

# --- traces (core.telemetry, docs/observability.md) ---
# The OpenTelemetry SDK reads the rest of its standard variables itself (OTEL_TRACES_SAMPLER,
# OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_HEADERS, ...); these say whether tracing is on.
OTEL_EXPORTER_OTLP_ENDPOINT = env_str(
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "",
    doc=(
        "the OTLP/HTTP collector traces go to (e.g. `http://127.0.0.1:4318`); set, the portal, "
        "the workers and the gateway trace (OpenTelemetry's standard variables: "
        "docs/observability.md); unset, tracing is off and costs nothing"
    ),
    shown="unset (off)",
)
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = env_str(
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "",
    doc="the traces URL itself (wins over `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`)",
    shown="unset",
)
OTEL_SDK_DISABLED = env_bool(
    "OTEL_SDK_DISABLED", False, doc="true: no traces, whatever endpoint is set", shown="`false`"
)
TRACE_URL_TEMPLATE = env_str(
    "TRACE_URL_TEMPLATE",
    "",
    doc=(
        "a trace's page in the trace store, `{trace_id}` replaced (e.g. "
        "`http://127.0.0.1:16686/trace/{trace_id}`): the version page links its upload's trace"
    ),
    shown="unset (no link)",
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {
        "handlers": ["console"],
        "level": env_str("LOG_LEVEL", "INFO", doc="the root logger's level", shown="`INFO`"),
    },
}

# --- the demo (`make run`, portal.demo) ---
DEMO_PASSWORD = env_str(
    "DEMO_PASSWORD", "lora-portal-demo", doc="the demo users' password (`make run`, debug only)"
)
DEMO_ENGINE_URL = env_str(
    "ENGINE_URL",
    "http://127.0.0.1:8100",
    doc="the demo's engine (`make run` sets it from `ENGINE_PORT`; `seed_demo --engine-url` wins)",
)
DEMO_PORT = env_int("PORT", 8000, minimum=1, doc="the port `make run` serves the portal on")

"""Settings for the test suite: production settings with test services and fast hashing."""

import os

from tests.paths import TEST_VAR, WORKER, worker_redis_url

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production-0123456789")
# Required outside debug (portal.E002): a fixed test seed, never used in production.
os.environ.setdefault("EVIDENCE_SIGNING_KEY", "7e57" * 16)
os.environ.setdefault("DATABASE_URL", "postgres://root@127.0.0.1:5432/lora_portal")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost,127.0.0.1")
os.environ.setdefault("PORTAL_VAR_DIR", str(TEST_VAR))
# Every request of the suite (and of the benches' load generators) comes from one address: the
# gateway's per-address limit is off unless a test or bench sets it (test_anonymous_tokens).
os.environ.setdefault("GATEWAY_ADDRESS_RATE_PER_SECOND", "0")
# A pytest-xdist worker's own Redis database, once: the services a test starts inherit this
# environment (and the marker), so they use the same database and do not move it again.
if os.environ.get("PORTAL_TEST_WORKER") != WORKER:
    os.environ["PORTAL_TEST_WORKER"] = WORKER
    os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"])

# The budgets' test clock (budgets.clock), which the production settings refuse: taken aside
# while they load, then set here (and left in the environment for the services a test starts).
_budget_clock_file = os.environ.pop("BUDGET_CLOCK_OFFSET_FILE", "")
from portal.settings import *  # noqa: E402,F403

if _budget_clock_file:
    os.environ["BUDGET_CLOCK_OFFSET_FILE"] = _budget_clock_file
BUDGET_CLOCK_OFFSET_FILE = _budget_clock_file
from portal.settings import DATABASES  # noqa: E402

if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # Lets the test database flush TRUNCATE the append-only audit table (see portal migration 0002).
    # No commit waits for its WAL to reach the disk: a crash of the test server loses nothing a
    # test run needs, and transactional tests commit often.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = (
        "-c lora_portal.audit_maintenance=on -c synchronous_commit=off"
    )

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
# Tests that serve portal.asgi under uvicorn (browser, live pages, playground) get the static files
# straight from static/, with no collectstatic step. Looked up per request (autorefresh), not
# listed when the middleware is built: Django's test client builds it for every client, and the
# listing (every installed app's static files, os.stat'ed) cost 43 ms each time, a third of
# the permission-matrix tests' time.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True

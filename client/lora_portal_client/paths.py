"""Every REST path the client calls, as in the portal's OpenAPI schema (tests/client checks)."""

from __future__ import annotations

TOKEN = "/api/v1/auth/token/"
ME = "/api/v1/users/me/"
ADAPTER = "/api/v1/tenants/{tenant}/adapters/{adapter}/"
VERSIONS = "/api/v1/tenants/{tenant}/adapters/{adapter}/versions/"
VERSION = "/api/v1/tenants/{tenant}/adapters/{adapter}/versions/{number}/"
VERSION_ACTION = {
    action: "/api/v1/tenants/{tenant}/adapters/{adapter}/versions/{number}/" + action + "/"
    for action in ("approve", "reject", "release", "disable", "residency")
}
UPLOADS = "/api/v1/tenants/{tenant}/adapters/{adapter}/uploads/"
UPLOAD = "/api/v1/tenants/{tenant}/adapters/{adapter}/uploads/{upload}/"
UPLOAD_COMPLETE = "/api/v1/tenants/{tenant}/adapters/{adapter}/uploads/{upload}/complete/"
ALIASES = "/api/v1/tenants/{tenant}/aliases/"
ALIAS = "/api/v1/tenants/{tenant}/aliases/{alias}/"
ALIAS_PROMOTE = "/api/v1/tenants/{tenant}/aliases/{alias}/promote/"
ALIAS_ROLLBACK = "/api/v1/tenants/{tenant}/aliases/{alias}/rollback/"
TENANT_USAGE = "/api/v1/tenants/{tenant}/usage/"
USAGE = "/api/v1/usage/"

# Compliance records, the audit export and the cost view.
EVIDENCE = "/api/v1/tenants/{tenant}/adapters/{adapter}/versions/{number}/evidence/"
EVIDENCE_KEY = "/api/v1/evidence/key/"
AUDIT_EXPORT = "/api/v1/audit/export/"
COST = "/api/v1/cost/"

CORE = [
    TOKEN,
    ME,
    ADAPTER,
    VERSIONS,
    VERSION,
    *VERSION_ACTION.values(),
    UPLOADS,
    UPLOAD,
    UPLOAD_COMPLETE,
    ALIASES,
    ALIAS,
    ALIAS_PROMOTE,
    ALIAS_ROLLBACK,
    TENANT_USAGE,
    USAGE,
]
RECORDS = [EVIDENCE, EVIDENCE_KEY, AUDIT_EXPORT, COST]

# The eval gate.
EVAL_SUITES = "/api/v1/tenants/{tenant}/eval-suites/"
EVAL_RUNS = "/api/v1/tenants/{tenant}/adapters/{adapter}/versions/{number}/eval-runs/"
EVAL_RUN = "/api/v1/tenants/{tenant}/adapters/{adapter}/versions/{number}/eval-runs/{run}/"
EVAL_CASES = "/api/v1/tenants/{tenant}/adapters/{adapter}/versions/{number}/eval-runs/{run}/cases/"
EVALS = [EVAL_SUITES, EVAL_RUNS, EVAL_RUN, EVAL_CASES]

# Budgets and their raises.
BUDGETS = "/api/v1/tenants/{tenant}/budgets/"
BUDGET = "/api/v1/tenants/{tenant}/budgets/{budget}/"
BUDGET_RAISES = "/api/v1/tenants/{tenant}/budgets/{budget}/raise-requests/"
BUDGET_PATHS = [BUDGETS, BUDGET, BUDGET_RAISES]

# Release plans on an alias (docs/releases.md).
RELEASES = "/api/v1/tenants/{tenant}/aliases/{alias}/releases/"
RELEASE = "/api/v1/tenants/{tenant}/aliases/{alias}/releases/{plan}/"
RELEASE_ACTION = {
    action: "/api/v1/tenants/{tenant}/aliases/{alias}/releases/{plan}/" + action + "/"
    for action in ("pause", "resume", "advance", "rollback")
}
RELEASE_PATHS = [RELEASES, RELEASE, *RELEASE_ACTION.values()]

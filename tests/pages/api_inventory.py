"""Where each action of the REST API is reachable in the pages: (API route name, HTTP method)
-> the page routes (tests/pages/routes.py) that offer it, or why no page does.

test_api_inventory fails when the API gains an action this table does not place, or when a page
named here is not in the route matrix, so "every action the API offers a role is reachable from
that role's pages" stays true as both grow.
"""

from __future__ import annotations

RELEASE_ACTIONS_NOT_ON_PAGES = (
    "release plans are started and moved through the API and the CLI; the alias's releases page "
    "shows them (acting from it is not built yet: docs/releases.md)"
)

# Not offered on a page, and why (a page would be the wrong tool, or another page does it).
NOT_ON_PAGES = {
    ("auth-token", "post"): "password-for-token exchange for scripts; pages use the login form",
    ("direct-upload-list", "post"): "starts a multipart upload straight to S3 for API clients; "
    "the browser streams files through the upload page instead",
    ("direct-upload-detail", "get"): "fresh presigned part URLs for an API client resuming",
    ("direct-upload-complete", "post"): "the API client's last call after sending the parts",
    ("user-me", "get"): "who a token belongs to, for the CLI's whoami; pages show the signed-in "
    "user and their tenants in the navigation",
    **{
        (name, "post"): RELEASE_ACTIONS_NOT_ON_PAGES
        for name in (
            "release-plan-list",
            "release-plan-pause",
            "release-plan-resume",
            "release-plan-advance",
            "release-plan-rollback",
        )
    },
    ("release-plan-samples", "get"): "kept sample text is read through the API by the tenant's "
    "eval reviewers; the releases page shows counts and guards only",
}

PAGES_FOR_API: dict[tuple[str, str], tuple[str, ...]] = {
    # release plans: the alias's releases page shows them
    ("release-plan-list", "get"): ("alias-releases",),
    ("release-plan-detail", "get"): ("alias-releases",),
    # the eval gate: suites and policies on the tenant's eval page, runs on the version page
    ("eval-suite-list", "get"): ("tenant-evals",),
    ("eval-suite-list", "post"): ("tenant-evals",),
    ("eval-policy", "get"): ("tenant-evals",),
    ("eval-policy", "put"): ("tenant-eval-policy",),
    ("eval-run-list", "get"): ("version-detail",),
    ("eval-run-list", "post"): ("version-eval-run-start",),
    ("eval-run-detail", "get"): ("version-detail",),
    ("eval-run-cases", "get"): ("version-detail",),
    # tenants, members, tokens
    ("tenant-list", "get"): ("dashboard", "platform-home"),
    ("tenant-list", "post"): ("platform-home",),
    ("tenant-detail", "get"): ("tenant-adapters", "platform-tenant"),
    ("tenant-detail", "patch"): ("platform-tenant",),
    ("sso-provider-list", "get"): ("platform-sso",),
    ("sso-provider-mappings", "get"): ("platform-sso",),
    ("sso-provider-mappings", "post"): ("platform-sso",),
    ("sso-provider-mapping-detail", "delete"): ("platform-sso-mapping-delete",),
    ("sso-provider-dry-run", "post"): ("platform-sso-dry-run",),
    ("user-list", "get"): ("platform-users",),
    ("user-list", "post"): ("platform-users",),
    ("user-detail", "get"): ("platform-users",),
    ("user-detail", "patch"): ("platform-user-roles", "platform-user-active"),
    ("member-list", "get"): ("tenant-members",),
    ("member-list", "post"): ("tenant-members",),
    ("member-detail", "get"): ("tenant-members",),
    ("member-detail", "patch"): ("tenant-members",),
    ("member-detail", "delete"): ("member-remove",),
    ("tenant-token-list", "get"): ("tenant-members",),
    ("tenant-token-list", "post"): ("tokens",),
    ("tenant-token-detail", "get"): ("tenant-members",),
    ("tenant-token-detail", "delete"): ("tenant-token-revoke", "token-revoke"),
    ("signing-key-list", "get"): ("tenant-keys",),
    ("signing-key-list", "post"): ("tenant-keys",),
    ("signing-key-detail", "get"): ("tenant-keys",),
    ("signing-key-detail", "delete"): ("signing-key-revoke",),
    ("notification-list", "get"): ("tenant-notifications",),
    ("notification-dismiss", "post"): ("notice-dismiss",),
    ("email-recipient-list", "get"): ("tenant-notifications",),
    ("email-recipient-list", "post"): ("email-recipient-add",),
    ("email-recipient-detail", "delete"): ("email-recipient-remove",),
    ("webhook-list", "get"): ("tenant-notifications",),
    ("webhook-list", "post"): ("webhook-add",),
    ("webhook-detail", "get"): ("tenant-notifications",),
    ("webhook-detail", "patch"): ("webhook-active",),
    ("webhook-detail", "delete"): ("webhook-delete",),
    ("webhook-deliveries", "get"): ("tenant-notifications",),
    ("budget-list", "get"): ("tenant-budgets",),
    ("budget-list", "post"): ("budget-set",),
    ("budget-detail", "get"): ("tenant-budgets",),
    ("budget-detail", "put"): ("budget-edit",),
    ("budget-detail", "patch"): ("budget-edit",),
    ("budget-detail", "delete"): ("budget-edit",),
    ("price-cards", "get"): ("platform-budgets",),
    ("price-cards", "put"): ("price-card-save",),
    ("budget-raise-requests", "get"): ("tenant-budgets",),
    ("budget-raise-requests", "post"): ("budget-raise-request-add",),
    ("budget-raise-request-list", "get"): ("platform-budgets",),
    ("budget-raise-request-detail", "get"): ("platform-budgets",),
    ("budget-raise-request-approve", "post"): ("budget-raise-request-decide",),
    ("budget-raise-request-reject", "post"): ("budget-raise-request-decide",),
    ("signature-policy", "get"): ("tenant-keys",),
    ("signature-policy", "put"): ("signature-policy-set",),
    # registry
    ("base-model-list", "get"): ("platform-base-models",),
    ("base-model-list", "post"): ("platform-base-models",),
    ("base-model-detail", "get"): ("platform-base-models",),
    ("adapter-list", "get"): ("tenant-adapters",),
    ("adapter-list", "post"): ("adapter-create",),
    ("adapter-detail", "get"): ("adapter-detail",),
    ("adapter-detail", "patch"): ("adapter-update",),
    ("adapter-grants", "post"): ("grant-add",),
    ("adapter-revoke-grants", "delete"): ("grant-revoke",),
    ("adapter-metrics-list", "get"): ("version-detail",),
    ("version-list", "get"): ("adapter-detail",),
    ("version-list", "post"): ("version-upload",),
    ("version-detail", "get"): ("version-detail",),
    ("version-approve", "post"): ("review-approve",),
    ("version-reject", "post"): ("review-reject",),
    ("version-release", "post"): ("version-release",),
    ("version-disable", "post"): ("version-disable",),
    ("version-residency", "get"): ("version-detail",),
    ("version-queue-list", "get"): ("review-queue", "dashboard"),
    ("direct-upload-list", "get"): ("adapter-detail",),
    ("direct-upload-detail", "delete"): ("direct-upload-abort",),
    ("alias-list", "get"): ("tenant-aliases",),
    ("alias-list", "post"): ("tenant-aliases",),
    ("alias-detail", "get"): ("tenant-aliases",),
    ("alias-detail", "put"): ("tenant-aliases",),
    ("alias-detail", "delete"): ("alias-delete",),
    ("alias-promote", "post"): ("alias-promote",),
    ("alias-rollback", "post"): ("alias-rollback",),
    ("alias-revisions", "get"): ("tenant-aliases",),
    # fleet
    ("engine-list", "get"): ("fleet-engines", "fleet-pools", "dashboard"),
    ("engine-list", "post"): ("fleet-engine-new",),
    ("engine-detail", "patch"): ("fleet-engine-edit",),
    ("engine-detail", "get"): ("fleet-engine",),
    ("engine-residency", "get"): ("fleet-engine", "fleet-residency"),
    ("engine-pin", "post"): ("fleet-version-act",),
    ("engine-unpin", "post"): ("fleet-version-act",),
    ("engine-warm", "post"): ("fleet-version-act",),
    ("engine-evict", "post"): ("fleet-version-act",),
    ("engine-drain", "post"): ("fleet-engine-state",),
    ("engine-undrain", "post"): ("fleet-engine-state",),
    ("engine-reconcile", "post"): ("fleet-engine-reconcile",),
    ("engine-actions", "get"): ("fleet-engine",),
    ("engine-advice", "get"): ("fleet-engine", "fleet-advice"),
    ("engine-launch-config", "get"): ("fleet-engine",),
    ("engine-alarms", "get"): ("fleet-engine", "fleet-alarms"),
    # audit and usage
    ("audit-list", "get"): ("audit",),
    ("audit-verify", "get"): ("audit-verify",),
    ("usage-list", "get"): ("platform-usage",),
    ("tenant-usage-list", "get"): ("tenant-usage",),
    # compliance records, the audit export, cost
    ("version-evidence", "get"): ("version-evidence-page",),
    ("evidence-key", "get"): ("version-evidence-page",),
    ("audit-export", "get"): ("audit",),
    ("cost", "get"): ("platform-cost", "tenant-cost"),
    ("cost-settings", "get"): ("platform-cost",),
    ("cost-settings", "put"): ("platform-cost-settings",),
}

"""Security class 12: one place for each rule, checked on the source as it is.

Each test names a rule that used to be written two or three times with different outcomes, and
fails when a second copy appears. docs/security.md (12) says where each one lives.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("adapters", "engine", "evals", "gateway", "portal", "tenants", "workers", "bench")
ACCESS = "adapters/access.py"


def _sources() -> dict[str, str]:
    found = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            found[str(path.relative_to(ROOT))] = path.read_text()
    return found


SOURCES = _sources()
TREES = {name: ast.parse(text, filename=name) for name, text in SOURCES.items()}


def _calls(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Attribute):
                if isinstance(fn.value, ast.Attribute) and fn.value.attr == "objects":
                    out.append((node.lineno, f"objects.{fn.attr}"))
                out.append((node.lineno, fn.attr))
            elif isinstance(fn, ast.Name):
                out.append((node.lineno, fn.id))
    return out


def _modules_with(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [name for name, text in SOURCES.items() if rx.search(text)]


# --- API viewsets write only through services ---

API_MODULES = sorted(
    name
    for name in SOURCES
    if re.fullmatch(r"[a-z_]+/api(_[a-z_]+)?\.py|portal/api/[a-z_]+\.py", name)
)
WRITES = {
    "record_event",
    "save",
    "delete",
    "bulk_create",
    "bulk_update",
    "select_for_update",
    "atomic",
    "objects.create",
    "get_or_create",
    "update_or_create",
    "assign_perm",
    "remove_perm",
}


def test_the_api_modules_are_known():
    assert {"tenants/api.py", "workers/api.py", "adapters/api.py", "portal/api/audit.py"} <= set(
        API_MODULES
    )


def test_api_viewsets_write_only_through_services():
    found = [
        f"{name}:{line} {call}"
        for name in API_MODULES
        for line, call in _calls(TREES[name])
        if call in WRITES
    ]
    assert not found, f"API modules that write models themselves (call a service): {found}"


# --- each definition once ---


def _defined(function: str) -> list[str]:
    return [
        name
        for name, tree in TREES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function
    ]


def test_key_fingerprint_is_defined_once():
    assert _defined("key_fingerprint") == ["adapters/validation/signatures.py"]


def test_the_supported_curves_are_listed_once():
    # Registration (tenants.services.signing_keys) and verification used to list different curves.
    assert _modules_with(r"[\"']secp\d+r1[\"']") == ["adapters/validation/signatures.py"]


def test_the_alias_target_pattern_is_written_once():
    assert _modules_with(r"@\[0-9\]\{1,9\}") == ["adapters/services/aliases.py"]


# --- each access decision in adapters/access.py ---


def test_guardian_is_asked_only_in_access():
    users = _modules_with(r"\b(get_objects_for_user|ObjectPermissionChecker|get_perms)\b")
    assert users == [ACCESS]


def test_superuser_status_is_read_only_in_access():
    readers = sorted(
        {
            name
            for name, tree in TREES.items()
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr == "is_superuser"
            and isinstance(node.ctx, ast.Load)
        }
    )
    assert readers == [ACCESS]


def test_the_refusals_of_each_rule_are_raised_in_one_place():
    # audit reach, the reviewer check, who may disable: one decision each, one error code each.
    codes = ("audit.not_allowed", "approval.not_reviewer", "approval.four_eyes")
    for code in (*codes, "disable.not_allowed"):
        assert _modules_with(re.escape(f'"{code}"')) == [ACCESS], code


# --- one service convention: the caller's access context in, the check inside ---

ACCESS_SERVICES = {
    "tenants/services/tenancy.py": None,  # every public function
    "workers/services/registry.py": None,
    "workers/services/operator.py": {"operator_act"},
    "workers/services/engines.py": {"engine_operator_transition", "engine_request_reconcile"},
    "tenants/services/tokens.py": {"token_issue", "token_revoke"},
    "adapters/services/lifecycle.py": {
        "version_approve",
        "version_reject",
        "version_release",
        "version_disable",
    },
    "adapters/services/registry.py": {"base_model_register", "base_model_register_from_dir"},
}
SERVICE_MODULES = sorted(
    name
    for name in SOURCES
    if re.fullmatch(r"[a-z_]+/services(/[a-z_]+)?\.py|tenants/tokens\.py", name)
)
# Who acts is the access context's user; a second "who" argument could disagree with it.
CALLER_ARGUMENTS = {"actor", "reviewer", "owner", "requester"}
# Internal steps that services and the canary guard call after their own check; the SSO sync's
# revocation, whose actor is the provider (a label), never a caller.
CALLER_ARGUMENT_ALLOWED = {
    "adapters/services/aliases.py:apply_targets",
    # A release plan's steps: the controller (a label) or a person's action after its check.
    "adapters/services/releases.py:alias_release_weights",
    "evals/services/release_plans.py:move_to_next",
    "evals/services/release_plans.py:roll_back",
    "tenants/services/tokens.py:tokens_revoke_for_user",
}


def test_services_that_people_call_take_the_access_context():
    missing = []
    for name, only in ACCESS_SERVICES.items():
        for node in TREES[name].body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            if only is not None and node.name not in only:
                continue
            if "access" not in {arg.arg for arg in node.args.kwonlyargs}:
                missing.append(f"{name}:{node.name}")
    assert not missing, f"services without an `access` argument: {missing}"


def test_no_service_takes_the_caller_beside_the_access_context():
    assert "adapters/services/lifecycle.py" in SERVICE_MODULES
    found = []
    for name in SERVICE_MODULES:
        for node in TREES[name].body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            given = {arg.arg for arg in node.args.kwonlyargs + node.args.args}
            if given & CALLER_ARGUMENTS and f"{name}:{node.name}" not in CALLER_ARGUMENT_ALLOWED:
                found.append(f"{name}:{node.name} {sorted(given & CALLER_ARGUMENTS)}")
    assert not found, f"services told who acts besides their access context: {found}"

"""Deploy checks with production-like settings, and no missing migrations."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.management import call_command

from tests.paths import REPO

# tests/settings.py puts test defaults into os.environ; a production-like run must not inherit them.
TEST_ONLY_VARS = {
    "SECRET_KEY",
    "EVIDENCE_SIGNING_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "SECURE_SSL_REDIRECT",
    "ALLOWED_HOSTS",
    "PORTAL_VAR_DIR",
}


def production_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TEST_ONLY_VARS}
    return {**env, "DJANGO_SETTINGS_MODULE": "portal.settings", **overrides}


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def deploy_ready_env(tmp_path, **overrides: str) -> dict[str, str]:
    """Production settings that pass every deploy check, with `overrides` on top."""
    settings = dict(
        DJANGO_DEBUG="0",
        SECRET_KEY="prod-like-" + "k3y" * 20,
        ALLOWED_HOSTS="portal.example.com",
        DATABASE_URL="postgres://root@127.0.0.1:5432/test",
        PORTAL_VAR_DIR=str(tmp_path),
        # Outside debug every engine needs its own key (tests/workers/test_engine_keys.py).
        PORTAL_ENGINE_KEYS='{"gpu-1": "' + "e" * 40 + '"}',
        # The audit chain's own HMAC key, not derived from SECRET_KEY (portal.W001).
        AUDIT_CHAIN_KEY="a" * 40,
        # The evidence signing key: required of its own outside debug (portal.E002).
        EVIDENCE_SIGNING_KEY="b" * 64,
    )
    return production_env(**{**settings, **overrides})


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    env = deploy_ready_env(tmp_path)
    result = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_fails_without_an_evidence_signing_key_in_production(tmp_path):
    """Not derived from SECRET_KEY: unset outside debug, the deploy check is an error."""
    env = deploy_ready_env(tmp_path, EVIDENCE_SIGNING_KEY="")
    result = manage(env, "check", "--deploy")
    assert result.returncode != 0
    assert "portal.E002" in result.stderr
    assert "EVIDENCE_SIGNING_KEY is not set: it is required when DJANGO_DEBUG is off" in (
        result.stderr
    )


def test_settings_refuse_to_start_without_a_secret_key_in_production(tmp_path):
    env = production_env(DJANGO_DEBUG="0", SECRET_KEY="", PORTAL_VAR_DIR=str(tmp_path))
    result = manage(env, "check")
    assert result.returncode != 0
    assert "SECRET_KEY is required when DJANGO_DEBUG is off" in result.stderr


def test_settings_fail_loudly_on_a_bad_boolean(tmp_path):
    env = production_env(DJANGO_DEBUG="maybe", PORTAL_VAR_DIR=str(tmp_path))
    result = manage(env, "check")
    assert result.returncode != 0
    assert "DJANGO_DEBUG='maybe' is not a boolean" in result.stderr


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)

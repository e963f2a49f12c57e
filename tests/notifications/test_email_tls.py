"""Notification e-mail is encrypted by default, and `check --deploy` refuses plain SMTP to a
server that is not on this host (tenants/checks.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.checks import run_checks

from tests.paths import REPO

SMTP = "django.core.mail.backends.smtp.EmailBackend"


def _email_settings(**overrides: str) -> list[str]:
    """EMAIL_USE_TLS, EMAIL_USE_SSL and EMAIL_PORT as portal/settings.py reads them from an
    environment without any EMAIL_ variable but `overrides`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMAIL_")}
    env.update(overrides, DJANGO_SETTINGS_MODULE="portal.settings")
    shown = subprocess.run(
        [sys.executable, "-c",
         "from django.conf import settings as s; "
         "print(s.EMAIL_USE_TLS, s.EMAIL_USE_SSL, s.EMAIL_PORT)"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return shown.stdout.split()


def test_email_uses_starttls_by_default():
    assert _email_settings() == ["True", "False", "587"]


def test_implicit_tls_turns_starttls_off():
    assert _email_settings(EMAIL_USE_SSL="1") == ["False", "True", "465"]


def _email_errors() -> list[str]:
    return [
        m.id or ""
        for m in run_checks(include_deployment_checks=True)
        if (m.id or "").startswith("tenants.E00")
    ]


@pytest.mark.parametrize("host", ["smtp.example.com", "10.0.0.5", "mail.localhost.example.com"])
def test_plain_smtp_to_another_host_fails_the_deploy_check(settings, host):
    settings.EMAIL_BACKEND, settings.EMAIL_HOST = SMTP, host
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    assert _email_errors() == ["tenants.E001"]


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "::1", "[::1]", "relay.localhost"])
def test_plain_smtp_to_this_host_passes(settings, host):
    settings.EMAIL_BACKEND, settings.EMAIL_HOST = SMTP, host
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    assert _email_errors() == []


@pytest.mark.parametrize("tls, ssl", [(True, False), (False, True)])
def test_encrypted_smtp_to_another_host_passes(settings, tls, ssl):
    settings.EMAIL_BACKEND, settings.EMAIL_HOST = SMTP, "smtp.example.com"
    settings.EMAIL_USE_TLS, settings.EMAIL_USE_SSL = tls, ssl
    assert _email_errors() == []


def test_both_kinds_of_tls_at_once_fail_the_deploy_check(settings):
    settings.EMAIL_BACKEND, settings.EMAIL_HOST = SMTP, "smtp.example.com"
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = True
    assert _email_errors() == ["tenants.E002"]


def test_a_backend_that_does_not_send_by_smtp_is_not_checked(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_USE_TLS, settings.EMAIL_USE_SSL = (
        "smtp.example.com",
        False,
        False,
    )
    assert _email_errors() == []

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.notifications.receivers import SmtpServer, WebhookReceiver


@pytest.fixture
def smtp_server(settings: Any) -> Iterator[SmtpServer]:
    """A real SMTP server on loopback, and the portal's e-mail settings pointing at it."""
    server = SmtpServer()
    server.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = server.port
    settings.EMAIL_USE_TLS = False
    yield server
    server.stop()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    hook = WebhookReceiver()
    hook.start()
    yield hook
    hook.stop()


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Tasks run in the calling process when enqueued (after commit, as in production)."""
    from portal.celery import app

    before, app.conf.task_always_eager = app.conf.task_always_eager, True
    yield
    app.conf.task_always_eager = before

"""LoRA Portal project package: settings, URLs, ASGI, Celery, audit log and the web shell."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]

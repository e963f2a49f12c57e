"""The request type page views get (the site's RequestIdMiddleware sets its id)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class PortalRequest(HttpRequest):
    """The request a page view gets: the middleware's id and, behind `page_view`'s login, a user.

    Only a type: views annotate with it (django-stubs' pattern for attributes middleware adds).
    """

    request_id: str
    user: User

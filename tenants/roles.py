"""The roles (tenancy's own, and the platform's), apart from the tables so that every module
of the app, the SSO tables among them, can name them without importing tenants.models."""

from django.db import models


class TenantRole(models.TextChoices):
    OWNER = "owner"
    MAINTAINER = "maintainer"
    VIEWER = "viewer"


class PlatformRole(models.TextChoices):
    """Platform roles are Django groups with these names."""

    PLATFORM_ADMIN = "platform-admin"
    REVIEWER = "reviewer"
    OPERATOR = "operator"
    # Reads everything for compliance (every tenant, the audit log, records, costs); changes nothing.
    AUDITOR = "auditor"

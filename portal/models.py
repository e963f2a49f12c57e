"""The portal app's models: the audit log's tables, whose code is in core (core/audit_models.py)
so the apps that record events depend on the shared base rather than on the site."""

from core.audit_models import AuditChainHead, AuditEvent

__all__ = ["AuditChainHead", "AuditEvent"]

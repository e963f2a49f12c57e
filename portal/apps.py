from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"

    def ready(self) -> None:
        from portal import (
            admin_audit,
            checks,  # noqa: F401  (registers the deploy checks)
            live_access,
            signals,  # noqa: F401  (connects the login audit receivers)
        )

        admin_audit.connect()  # admin-site edits go into the audit chain
        live_access.connect()  # live sockets re-check access when memberships or grants change

from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"

    def ready(self) -> None:
        from portal import live_access
        from portal import signals  # noqa: F401  (connects the login audit receivers)

        live_access.connect()  # live sockets re-check access when memberships or grants change

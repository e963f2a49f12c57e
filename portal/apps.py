from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"

    def ready(self) -> None:
        from portal import signals  # noqa: F401  (connects the login audit receivers)

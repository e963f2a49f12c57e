from django.apps import AppConfig


class AdaptersConfig(AppConfig):
    name = "adapters"

    def ready(self) -> None:
        from adapters import tasks  # noqa: F401  (registers them: services enqueue them by name)
        from adapters.access import AccessContext
        from tenants import access_port

        # tenants' views and services ask the rules through its port (they sit above tenants).
        access_port.connect(AccessContext)

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"

    def ready(self) -> None:
        from tenants import (
            schema,  # noqa: F401  (registers the OpenAPI auth extension)
            tasks,  # noqa: F401  (registers them: services enqueue them by name)
        )

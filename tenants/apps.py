from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"

    def ready(self) -> None:
        from tenants import (
            checks,  # noqa: F401  (registers the e-mail deploy check)
            schema,  # noqa: F401  (registers the OpenAPI auth extension)
            tasks,  # noqa: F401  (registers them: services enqueue them by name)
        )

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"

    def ready(self) -> None:
        from gateway.invalidation import connect

        connect()

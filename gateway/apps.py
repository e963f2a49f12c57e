from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"

    def ready(self) -> None:
        from gateway.invalidation import connect
        from gateway.metrics import GatewayCollector
        from workers.metrics import add_collector

        connect()
        add_collector(GatewayCollector)  # /metrics scrapes the gateway's beside the fleet's

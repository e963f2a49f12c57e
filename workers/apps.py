from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"

    def ready(self) -> None:
        from adapters import fleet_port
        from adapters.signals import adapter_schedule_changed, version_status_changed
        from workers import (
            checks,  # noqa: F401  (registers the engine-key deploy checks)
            registry_answers,
            tasks,  # noqa: F401  (registers them: services enqueue them by name)
        )
        from workers.receivers import on_adapter_schedule_changed, on_version_status_changed

        version_status_changed.connect(
            on_version_status_changed, dispatch_uid="workers.version_status_changed"
        )
        adapter_schedule_changed.connect(
            on_adapter_schedule_changed, dispatch_uid="workers.adapter_schedule_changed"
        )
        # The registry's questions to the fleet (adapters/fleet_port.py).
        fleet_port.connect(registry_answers)

from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"

    def ready(self) -> None:
        from adapters.signals import version_status_changed
        from workers import checks  # noqa: F401  (registers the engine-key deploy checks)
        from workers.receivers import on_version_status_changed

        version_status_changed.connect(
            on_version_status_changed, dispatch_uid="workers.version_status_changed"
        )

from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "evals"

    def ready(self) -> None:
        from adapters import approval_checks, page_panels
        from adapters.signals import version_status_changed
        from evals import tasks  # noqa: F401  (registers them: services enqueue them by name)
        from evals.pages.gate import queue_gate_notes, version_eval_panel
        from evals.receivers import on_version_status_changed
        from evals.services.gate import eval_gate_check

        # The registry's approval and version page ask through their ports; they never
        # import evals.
        approval_checks.register(eval_gate_check)
        page_panels.register(version_eval_panel)
        page_panels.register_queue_notes(queue_gate_notes)
        # A version that becomes validated is evaluated at once when its adapter is gated.
        version_status_changed.connect(
            on_version_status_changed, dispatch_uid="evals.version_status_changed"
        )

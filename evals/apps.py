from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "evals"

    def ready(self) -> None:
        from adapters import approval_checks, page_panels
        from evals.pages import queue_gate_notes, version_eval_panel
        from evals.services.gate import eval_gate_check

        # The registry's approval and version page ask through their ports; they never
        # import evals.
        approval_checks.register(eval_gate_check)
        page_panels.register(version_eval_panel)
        page_panels.register_queue_notes(queue_gate_notes)

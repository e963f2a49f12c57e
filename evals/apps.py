from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "evals"

    def ready(self) -> None:
        from adapters import approval_checks
        from evals.services.gate import eval_gate_check

        # The registry's approval asks the gate through its port; it never imports evals.
        approval_checks.register(eval_gate_check)

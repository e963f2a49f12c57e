"""Beat's entries into budgets: thin; the logic is in budgets/alerts.py and budgets/retention.py."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="budgets.tasks.send_budget_alerts", acks_late=True, ignore_result=True)
def send_budget_alerts() -> int:
    """Idempotent: each threshold crossed in a window is told once, however often this runs."""
    from budgets.alerts import send_budget_alerts as run

    return run()


@shared_task(name="budgets.tasks.prune_budget_history", acks_late=True, ignore_result=True)
def prune_budget_history() -> int:
    """Idempotent: what is past BUDGET_HISTORY_RETENTION_DAYS goes, whenever this runs."""
    from budgets.retention import prune_history

    return sum(prune_history())

"""What the registry asks the fleet, which sits above it (workers): the hard rules a warm-up
policy must keep and the lock they count under, where a version is placed, and the largest rank
every engine that could serve a version loads.

The registry never imports workers. WorkersConfig.ready() connects the fleet's answers
(workers/registry_answers.py); what the registry announces instead (a status or schedule
change) goes out as a signal (adapters/signals.py). docs/architecture.md has the pattern.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from adapters.models import Adapter, AdapterVersion
from adapters.warmup_window import Problem, WarmupWindow


class Fleet(Protocol):
    def lock_schedule_scope(self, *, tenant_id: int, pools: Iterable[str]) -> None:
        """Serialise rule checks that count the same tenant or pool (inside a transaction)."""
        ...

    def warmup_problems(
        self, *, adapter: Adapter, policy: str | None = None, window: WarmupWindow | None = None
    ) -> list[Problem]:
        """The hard rules the adapter's warm-up policy would break; none: it may be saved."""
        ...

    def version_placement(self, version: AdapterVersion) -> list[dict[str, object]]:
        """Where the version is, engine by engine (tier, desired and observed state)."""
        ...

    def max_rank_for(self, version: AdapterVersion) -> int:
        """The smallest max_lora_rank among the engines that could serve the version."""
        ...


_fleet: Fleet | None = None


def connect(answers: Fleet) -> None:
    """Called once, by WorkersConfig.ready()."""
    global _fleet
    _fleet = answers


def fleet() -> Fleet:
    if _fleet is None:
        raise RuntimeError("The fleet is not connected: is 'workers' in INSTALLED_APPS?")
    return _fleet

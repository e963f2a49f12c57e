"""The fleet's answers to what the registry asks (adapters/fleet_port.py); connected by
WorkersConfig.ready(). Nothing is decided here: each name is the fleet's own function."""

from __future__ import annotations

from workers.schedule_rules import lock_schedule_scope, warmup_problems
from workers.selectors import max_rank_for, version_placement

__all__ = ["lock_schedule_scope", "max_rank_for", "version_placement", "warmup_problems"]

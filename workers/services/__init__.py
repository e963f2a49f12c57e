"""Writes for the fleet: engines' observed state and their operator transitions (engines.py),
the engine catalogue (registry.py), what operators ask of one engine for one version
(operator.py)."""

"""Writes of the eval gate: suites, policies, runs, the gate."""

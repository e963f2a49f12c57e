"""The eval gate's pages (gate.py) and release plans on the alias page (releases.py)."""

"""Page-only reads of the fleet: one engine and many (engines.py), the fleet-wide overview
pages (overview.py)."""

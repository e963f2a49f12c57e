"""Signals other apps listen to; the registry does not know who reacts (the fleet does)."""

from django.dispatch import Signal

# Sent inside the transaction of a version's status change, with `version`, `before`, `after`
# and `actor`. Receivers that enqueue work must do it with transaction.on_commit.
version_status_changed = Signal()

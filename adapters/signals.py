"""Signals other apps listen to; the registry does not know who reacts (the fleet does)."""

from django.dispatch import Signal

# Sent inside the transaction of a version's status change, with `version`, `before`, `after`
# and `actor`. Receivers that enqueue work must do it with transaction.on_commit.
version_status_changed = Signal()

# Sent after commit, with `adapter`, when an adapter's warm-up policy or window was saved (on
# create, when not on_demand). The fleet puts its beat entries in line with it.
adapter_schedule_changed = Signal()

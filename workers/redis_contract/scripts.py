"""The Lua scripts of the Redis contract, read from the .lua files beside this module and
composed at import: a function several scripts use (distinct_unpinned.lua, admit.lua) is one file
put before each script that calls it, so no Lua is written twice.

Every piece is put after a newline, so each script is the text its pieces make, nothing added.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent

# A replica that died mid-request cannot block an adapter forever: the counters' TTL (seconds).
CONCURRENCY_TTL_S = 3600
# How long the reaper's mark on a request it settled waits for that request's own settle (a
# replica whose lease lapsed while it was alive settles later; budget_settle.lua).
REAPED_REQUEST_TTL_S = 86400


def _compose(*names: str) -> str:
    return "".join("\n" + (_HERE / f"{name}.lua").read_text() for name in names)


_ADMIT = ("distinct_unpinned", "admit")

# The fleet's (workers.engine_slots).
PIN_CLAIM = _compose("distinct_unpinned", "pin_claim")
PINS_OBSERVED = _compose("pins_observed")
SLOT_ENTER = _compose(*_ADMIT, "slot_enter")

# The gateway's (gateway.limits, gateway.replicas): the admission runs inside the ledger's wrapper.
# Budgets (budget_reserve.lua) wrap the admission as a function, unedited: their check comes
# before it counts anything, their reservation after it admitted.
_ADMISSION_IN_BUDGETS = (
    _compose(*_ADMIT)
    + "\nlocal function admission()"
    + _compose("admission")
    + "\nend"
    + _compose("budget_reserve")
)
ENTER = (
    _compose("ledger", "ledger_enter")
    .replace("ENTER_BODY", _ADMISSION_IN_BUDGETS)
    .replace("CONCURRENCY_TTL", str(CONCURRENCY_TTL_S))
)
LEAVE = _compose("ledger", "leave")
BUDGET_SETTLE = _compose("ledger", "budget_settle")
REAP = _compose("reap").replace("REAPED_REQUEST_TTL", str(REAPED_REQUEST_TTL_S))
# The gateway's recorder (gateway.conversations): a batch's conversation keys in one call.
CONVERSATION_TURNS = _compose("conversation_turns")

"""Where the shared counts live in Redis. Every key the scripts (scripts.py) read or write is
named here, and only here."""

from __future__ import annotations

FLEET = "lp:fleet"
GATEWAY = "lp:gw"

REPLICAS = f"{GATEWAY}:replicas"  # set: the gateway replicas that hold counts
LEASE_PREFIX = f"{GATEWAY}:lease:"  # + replica: set while the replica lives
LEDGER_PREFIX = f"{GATEWAY}:held:"  # + replica: what the replica's requests hold


def inflight_key(engine: str) -> str:
    """Hash: served name -> requests in flight (or queued) on `engine` (gateway.limits counts)."""
    return f"{FLEET}:inflight:{engine}"


def load_key(engine: str) -> str:
    """Hash: lane (`live`, `background`) -> weight of the requests in flight on `engine`, every
    replica's, base-model requests included (admission.lua keeps slots free for live ones)."""
    return f"{FLEET}:load:{engine}"


def pinned_key(engine: str) -> str:
    """Sorted set: served names pinned on `engine` -> when the pin was placed (unix time)."""
    return f"{FLEET}:pinned:{engine}"


def lease_key(replica: str) -> str:
    return LEASE_PREFIX + replica


def ledger_key(replica: str) -> str:
    """Hash: what one gateway replica holds in the shared counts (ledger_enter.lua); field
    `<request>\\n<counter key>`, or `<request>\\n<hash key>\\n<field>` for an engine's in-flight
    hash."""
    return LEDGER_PREFIX + replica


def tenant_key(tenant_id: int) -> str:
    """Counter: the tenant's requests in flight, by weight."""
    return f"{GATEWAY}:tflight:{tenant_id}"


def rpm_key(tenant_id: int, minute: int) -> str:
    """Counter: the tenant's requests in one minute (unix time // 60), by weight."""
    return f"{GATEWAY}:rpm:{tenant_id}:{minute}"


def conc_key(served_name: str) -> str:
    """Counter: the version's requests in flight on every replica, by weight."""
    return f"{GATEWAY}:conc:{served_name}"


BUDGETS_READY = (
    f"{GATEWAY}:budgets:ready"  # set once the budgets' counts are rebuilt (budgets.rebuild)
)
BUDGETS_REAPED = f"{GATEWAY}:budgets:reaped"  # hash: `<budget>|<window>` -> worst cases reaped
# + `<ledger>#<request>`: a request whose reservations the reaper settled at their worst case
# ('reaped'), then 'settled' once its own settle came (budget_settle.lua adds nothing more).
BUDGETS_REAPED_REQUEST = f"{GATEWAY}:budgets:reaped-request:"


def budget_key(budget_id: int, window: int) -> str:
    """Hash: one budget's window (its start, unix seconds): `used` (settled tokens), `reserved`
    (worst cases of the requests in flight)."""
    return f"{GATEWAY}:budget:{budget_id}:{window}"


# Hash: `sent` (samples pushed to RELEASE_SAMPLES, below) and `dropped` (samples a replica's
# buffer had no room for, or Redis refused), summed over every gateway replica since Redis started.
RELEASE_SAMPLES_COUNTS = f"{GATEWAY}:release:samples:counts"
# List: live answers the gateway sampled for release plans' live checks, as JSON objects
# {alias_id, version_id, at, body}, pushed after the reply is delivered (gateway.release_samples),
# popped and scored by a worker (evals.services.live_samples). Trimmed to RELEASE_SAMPLES_MAX:
# under a backlog the newest are kept.
RELEASE_SAMPLES = f"{GATEWAY}:release:samples"
RELEASE_SAMPLES_MAX = 10_000
# List: the stable's sampled requests of plans in a shadow step, waiting (seconds) for a worker
# to ask the candidate them again (evals.services.shadow_pairs); never longer than
# RELEASE_SHADOW_BACKLOG: one that finds it full is skipped and counted, not queued.
RELEASE_SHADOW = f"{GATEWAY}:release:shadow"
RELEASE_SHADOW_LOCK = f"{GATEWAY}:release:shadow-lock"  # one worker asks at a time

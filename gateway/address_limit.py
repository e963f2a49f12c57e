"""The per-address limit on /v1/, checked before the token is looked at: past it a client address
is answered 429 with no lookup, no Redis command and no database row.

A token bucket per address, in process: GATEWAY_ADDRESS_RATE_PER_SECOND requests a second with
bursts of GATEWAY_ADDRESS_BURST, per replica (behind N replicas an address gets up to N times it).
IPv6 addresses count per /64, the block one host is usually given. Tenants' own limits (requests
per minute, in flight) stay in Redis (gateway.limits); this one only makes a flood cheap to refuse.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

# Buckets kept at most; past it the full (idle) ones are dropped, then all if still too many: a
# flood from many addresses costs bounded memory, at worst a fresh burst for each address.
MAX_ADDRESSES = 100_000


@dataclass(slots=True)
class Bucket:
    tokens: float
    at: float


class AddressLimit:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.buckets: dict[str, Bucket] = {}

    def retry_after(self, address: str, now: float) -> int:
        """0 when a request from `address` may go on (it is counted); else the whole seconds
        until one may. A rate of 0 turns the limit off."""
        if self.rate <= 0:
            return 0
        key = address_key(address)
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= MAX_ADDRESSES:
                self._prune(now)
            bucket = self.buckets[key] = Bucket(float(self.burst), now)
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0
        return max(1, math.ceil((1.0 - bucket.tokens) / self.rate))

    def _prune(self, now: float) -> None:
        refill = self.burst / self.rate
        self.buckets = {k: b for k, b in self.buckets.items() if now - b.at < refill}
        if len(self.buckets) >= MAX_ADDRESSES:
            self.buckets.clear()


def address_key(address: str) -> str:
    """The address itself; an IPv6 address's /64 (one host may hold the whole block)."""
    if ":" not in address:
        return address
    try:
        return str(ipaddress.IPv6Network(f"{address}/64", strict=False))
    except ValueError:
        return address

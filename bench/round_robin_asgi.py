"""The routing benchmark's baseline (bench/gateway_routing.py): portal.asgi with the gateway's
engine choice for a version replaced by a plain round robin over the usable engines, blind to
where the version is resident. Only the benchmark starts it; the product has no such switch."""

from __future__ import annotations

import itertools
from typing import Any

from portal.asgi import application  # sets Django up, then builds the gateway

from gateway.app import Gateway  # isort: skip (needs Django set up by portal.asgi)

_turns = itertools.count(1)


def _round_robin(
    self: Gateway,
    candidates: list[Any],
    held: dict[str, Any],
    table: Any,
    tenant_id: int,
    *,
    background: bool = False,
) -> Any:
    return candidates[next(_turns) % len(candidates)]


# The running gateway is an instance of the class: the method is looked up on it at each request.
Gateway.choose_for_version = _round_robin  # type: ignore[method-assign]

__all__ = ["application"]

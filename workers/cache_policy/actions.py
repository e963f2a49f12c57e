"""The typed actions the cache policy returns; the controller (or simulator) carries them out.

In vLLM terms (with the portal's engine plugin): Load is `add_lora` (reads the weights into the
engine cache and, as vLLM does, activates them in a GPU slot); Warm is a one-token warm-up request
(moves a cached version into a GPU slot); Pin is `pin_lora` (CPU cache and GPU slot); Unpin and
Evict (`remove_lora`: gone from the engine cache, not only unregistered) need the plugin.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pin:
    version: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Unpin:
    version: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Evict:
    version: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Load:
    version: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Warm:
    version: str
    reason: str = ""


Action = Pin | Unpin | Evict | Load | Warm

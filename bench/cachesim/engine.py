"""One engine's adapter cache as vLLM 0.32 runs it (vllm/lora/worker_manager.py, model_manager.py).

- The CPU cache (`--max-cpu-loras`) and the GPU slots (`--max-loras`) are both LRU, and the GPU
  slots are a subset of the CPU cache: evicting from the cache also frees the GPU slot.
- A request (or `add_lora`, or a warm-up) touches its adapter in both LRUs; if it is not cached it
  is read from disk first, evicting the oldest unpinned cached adapter when the cache is full; then
  it is activated in a GPU slot, pushing the oldest unpinned active adapter back to the CPU cache.
- Adapters of running requests are touched at every engine step, so vLLM's LRU reaches them last;
  here they are simply never victims. When nothing can be a victim the request waits (vLLM's
  scheduler caps distinct adapters in a batch at --max-loras).
A victim chooser can replace LRU: only the offline optimum (belady) uses it, as an oracle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

VictimChooser = Callable[[list[str]], str]  # candidates, least recently used first -> victim


@dataclass(frozen=True, slots=True)
class Transfer:
    cold: bool  # read from the node's disk into the engine cache
    moved: bool  # copied from the engine cache into a GPU slot
    evicted: str | None  # left the engine cache to make room
    demoted: str | None  # lost its GPU slot (stays in the engine cache)


class EngineModel:
    def __init__(self, name: str, gpu_slots: int, cpu_slots: int) -> None:
        if gpu_slots < 1 or cpu_slots < gpu_slots:
            raise ValueError("need 1 <= gpu_slots <= cpu_slots (vLLM asserts capacity >= slots)")
        self.name = name
        self.gpu_slots = gpu_slots
        self.cpu_slots = cpu_slots
        self.cpu: OrderedDict[str, None] = OrderedDict()  # the engine cache, LRU first
        self.gpu: OrderedDict[str, None] = OrderedDict()  # active adapters, LRU first
        self.pinned: set[str] = set()
        self.running: dict[str, int] = {}
        self.queued: dict[str, int] = {}  # sent to this engine, not admitted yet (simulator-kept)
        self.loaded_at: dict[str, float] = {}
        self.last_used: dict[str, float] = {}
        self.cpu_chooser: VictimChooser | None = None
        self.gpu_chooser: VictimChooser | None = None

    def where(self, v: str) -> str:
        return "gpu" if v in self.gpu else "cpu" if v in self.cpu else "none"

    def busy(self, v: str) -> bool:
        return self.running.get(v, 0) > 0

    def _cpu_victims(self, exclude: str) -> list[str]:
        return [x for x in self.cpu if x != exclude and x not in self.pinned and not self.busy(x)]

    def _gpu_victims(self, exclude: str) -> list[str]:
        return [x for x in self.gpu if x != exclude and x not in self.pinned and not self.busy(x)]

    def _pick(self, candidates: list[str], chooser: VictimChooser | None) -> str:
        return chooser(candidates) if chooser is not None else candidates[0]

    def can_activate(self, v: str) -> bool:
        """Could a request (or add_lora, pin, warm-up) for v get v into a GPU slot now?"""
        if v in self.gpu:
            return True
        if v not in self.cpu and len(self.cpu) >= self.cpu_slots:
            victims = self._cpu_victims(v)
            if not victims:
                return False
            if self._pick(victims, self.cpu_chooser) in self.gpu:
                return True  # evicting it frees its GPU slot too
        return len(self.gpu) < self.gpu_slots or bool(self._gpu_victims(v))

    def activate(self, v: str, now: float) -> Transfer:
        """vLLM's add_adapter + activate_adapter for v; call can_activate first."""
        cold = v not in self.cpu
        evicted = demoted = None
        if cold:
            if len(self.cpu) >= self.cpu_slots:
                evicted = self._pick(self._cpu_victims(v), self.cpu_chooser)
                self.remove(evicted)
            self.cpu[v] = None
            self.loaded_at[v] = now
        else:
            self.cpu.move_to_end(v)
        moved = v not in self.gpu
        if moved:
            if len(self.gpu) >= self.gpu_slots:
                demoted = self._pick(self._gpu_victims(v), self.gpu_chooser)
                del self.gpu[demoted]
            self.gpu[v] = None
        else:
            self.gpu.move_to_end(v)
        self.last_used[v] = now
        return Transfer(cold, moved, evicted, demoted)

    def remove(self, v: str) -> None:
        """Gone from the engine cache (LRU eviction, or the plugin's real evict)."""
        self.cpu.pop(v, None)
        self.gpu.pop(v, None)
        self.pinned.discard(v)
        self.loaded_at.pop(v, None)

    def start(self, v: str) -> None:
        self.running[v] = self.running.get(v, 0) + 1

    def finish(self, v: str, now: float) -> None:
        left = self.running[v] - 1
        if left:
            self.running[v] = left
        else:
            del self.running[v]
        # Its last engine step touched it in both LRUs.
        if v in self.cpu:
            self.cpu.move_to_end(v)
        if v in self.gpu:
            self.gpu.move_to_end(v)
        self.last_used[v] = now

    def pin_room(self) -> bool:
        """One more pin still leaves a GPU slot and a cache slot unpinned (else vLLM can die)."""
        return len(self.pinned) + 1 < min(self.gpu_slots, self.cpu_slots)

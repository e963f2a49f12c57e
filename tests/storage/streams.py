"""Source streams for storage tests: large data made on the fly, and sources that break."""

from __future__ import annotations

import hashlib
import random

MiB = 1024 * 1024


class GeneratedStream:
    """`total` pseudo-random bytes produced as they are read; remembers the sha256 it handed out.

    `max_read` makes reads short (as sockets do), so a reader that takes a short read for the
    end of the stream is caught.
    """

    def __init__(self, total: int, *, seed: int = 0, max_read: int | None = None):
        self.remaining = total
        self.handed_out = 0
        self._rng = random.Random(seed)
        self._max_read = max_read
        self._hasher = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise AssertionError("the storage must read in bounded chunks")
        take = min(size, self.remaining, self._max_read or size)
        data = self._rng.randbytes(take)
        self._hasher.update(data)
        self.remaining -= take
        self.handed_out += take
        return data

    @property
    def sha256(self) -> str:
        assert self.remaining == 0, "read the whole stream first"
        return self._hasher.hexdigest()


class BreakingStream(GeneratedStream):
    """Fails like a dropped client connection once `fail_after` bytes have been handed out."""

    def __init__(self, total: int, *, fail_after: int):
        super().__init__(total)
        self.fail_after = fail_after

    def read(self, size: int = -1) -> bytes:
        if self.handed_out >= self.fail_after:
            raise ConnectionResetError("client went away")
        return super().read(min(size, self.fail_after - self.handed_out))


def generated_bytes(total: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(total)

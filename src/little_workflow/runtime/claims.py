"""The step paths one execution of a run has taken, kept small: a long run must not hold
a string and a record per step until its end (BENCHMARKS.md M2: peak memory flat in
the number of steps)."""

from __future__ import annotations

from array import array

_FIRST_SIZE = 1024  # slots; a power of two


class PathDigests:
    """An open-addressing set of 64-bit path digests (`hash(path)`), 12 to 24 bytes a
    path (the table is kept at most two thirds full). Two different paths may share a digest:
    `add` then says "maybe taken" and the caller decides exactly."""

    __slots__ = ("_slots", "_mask", "_count")

    def __init__(self) -> None:
        self._slots = _zeros(_FIRST_SIZE)
        self._mask = _FIRST_SIZE - 1
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, path: str) -> bool:
        """Take `path`'s digest: True when it was free, False when some path took it."""
        digest = hash(path) or 1  # 0 marks an empty slot
        slots, mask = self._slots, self._mask
        i = digest & mask
        while True:
            held = slots[i]
            if held == 0:
                break
            if held == digest:
                return False
            i = (i + 1) & mask
        slots[i] = digest
        self._count += 1
        if 3 * self._count > 2 * len(slots):
            self._grow()
        return True

    def _grow(self) -> None:
        old = self._slots
        size = 2 * len(old)
        slots, mask = _zeros(size), size - 1
        for digest in old:
            if digest:
                i = digest & mask
                while slots[i]:
                    i = (i + 1) & mask
                slots[i] = digest
        self._slots, self._mask = slots, mask


def _zeros(size: int) -> "array[int]":
    # Repeating a one-slot array allocates the table once (no bytes object beside it).
    return array("q", (0,)) * size

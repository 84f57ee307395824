"""A small memo for values derived from objects that are remembered by identity.

Compiling a design derives the same things from the same objects many times (a kernel's step
program and schedule, a trace's bound kernels), and a sweep's gate asks the same questions of
the same estimator every trial. Those objects are immutable in use but not all hashable, and
hashing a large one by value costs what the memo saves; so the key holds their id()s, and the
entry holds the objects themselves: an id() is not reused while its object is alive, so a hit
is always for the very objects asked about. The oldest of `size` entries goes first.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence


class HeldMemo:
    """`get(held, key, make)`: make() once per (identities of `held`, `key`) while remembered."""

    def __init__(self, size: int):
        self.size = size
        self._entries: dict[tuple, tuple[tuple, Any]] = {}

    def get(self, held: Sequence[object], key: Hashable, make: Callable[[], Any]) -> Any:
        held = tuple(held)
        full = (tuple(map(id, held)), key)
        hit = self._entries.get(full)
        if hit is not None and all(a is b for a, b in zip(hit[0], held)):
            return hit[1]
        value = make()
        while len(self._entries) >= self.size:
            del self._entries[next(iter(self._entries))]
        self._entries[full] = (held, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)

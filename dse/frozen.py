"""An immutable, hashable mapping: what the explorer's frozen records hold their dicts in."""
from __future__ import annotations

from typing import Iterable, Iterator, Mapping, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V]):
    """An immutable, hashable dict (keeps insertion order)."""
    __slots__ = ("_d",)

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()):
        self._d = dict(items)

    def __getitem__(self, key: K) -> V:
        return self._d[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(tuple(self._d.items()))

    def __repr__(self) -> str:
        return f"FrozenMap({self._d!r})"

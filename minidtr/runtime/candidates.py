"""The eviction candidates: every resident storage that may be evicted.

A candidate is resident, has a recipe (not a constant) and is not pinned. The
set keeps the order in which storages became candidates (made, rebuilt,
unpinned), which decides between equal scores: the first one goes. It is told
when a candidate's score inputs change (``touch``: accessed, locked), when one
was evicted and when an evicted storage comes back or leaves for good; this one
needs none of that, but the accelerator's candidate table
(``fast/table.py``), which keeps scores' inputs in arrays, does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .storage import Storage


class Candidates:
    """An insertion-ordered set of storages."""

    __slots__ = ("_order",)

    def __init__(self, storages: Iterable[Storage] = ()):
        self._order: dict[Storage, None] = dict.fromkeys(storages)

    def add(self, storage: Storage) -> None:
        """``storage`` became a candidate; one that already is keeps its place."""
        self._order[storage] = None

    def discard(self, storage: Storage) -> None:
        """``storage`` is no candidate any more (pinned, made a constant, banished)."""
        self._order.pop(storage, None)

    def evicted(self, storage: Storage, reason: str) -> None:
        """``storage`` was evicted (for ``reason``)."""
        self._order.pop(storage, None)

    def touch(self, storage: Storage) -> None:
        """``storage``'s last access or lock count changed."""

    def left_evicted(self, storage: Storage) -> None:
        """``storage`` left the evicted set (rebuilt, banished, freed)."""

    def set_searched(self, searched: bool) -> None:
        """Whether searches may happen from now on: a budget (or the ``ignore`` policy,
        whose dead storages wait for the heuristic) is in force."""

    def in_order(self) -> list[Storage]:
        return list(self._order)

    def __iter__(self) -> Iterator[Storage]:
        """The candidates in order (a snapshot: the set may change meanwhile)."""
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, storage: Storage) -> bool:
        return storage in self._order

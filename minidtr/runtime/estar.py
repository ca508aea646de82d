"""e*(t), the evicted neighbourhood of a storage, by plain walks over the graph.

Evicting a resident storage ``t`` makes it one more evicted node of the graph. If
some of its neighbours are evicted already, ``t`` joins them: rebuilding ``t``
later will first rebuild its *evicted ancestors* (reachable from ``t`` through
evicted parents), and rebuilding any of its *evicted descendants* (reachable
through evicted children) will need ``t``. h_DTR charges ``t`` for all of them:

    e*(t) = evicted ancestors of t  +  evicted descendants of t
    score = (c(t) + c(e*(t))) / (m(t) * s(t))

A storage's ``parents`` are the distinct storages its recipe reads; its
``children`` the storages computed from it (weak references: a child that died
is gone). A banished storage was freed for good and is no one's neighbour. Only
a storage's own allocator's storages count: a value made in another allocator
(outside an isolated run) is a fixed input there, never evicted by this one.

These are the definitions the runtime runs with ``Runtime(reference=True)``;
``fast/closures.py`` computes the same numbers from cached closures.
"""

from __future__ import annotations

from .storage import Storage


def is_evicted(storage: Storage, owner) -> bool:
    """Whether ``storage`` is an evicted (not banished) value of allocator ``owner``."""
    return storage.buffer is None and not storage.banished and storage.allocator is owner


def evicted_parents(storage: Storage) -> list[Storage]:
    owner = storage.allocator
    return [p for p in storage.parents if is_evicted(p, owner)]


def evicted_children(storage: Storage) -> list[Storage]:
    owner = storage.allocator
    return [c for c in storage.live_children() if is_evicted(c, owner)]


def walk(start: list[Storage], step) -> list[Storage]:
    """Every storage reachable from ``start`` by ``step`` (``start`` included), each once,
    in the order first reached."""
    found: dict[int, Storage] = {}
    stack = list(start)
    while stack:
        storage = stack.pop()
        if storage.id not in found:
            found[storage.id] = storage
            stack.extend(step(storage))
    return list(found.values())


def evicted_ancestors(storage: Storage) -> list[Storage]:
    """What rebuilding ``storage`` would rebuild first."""
    return walk(evicted_parents(storage), evicted_parents)


def evicted_descendants(storage: Storage) -> list[Storage]:
    """What would need ``storage`` to be rebuilt."""
    return walk(evicted_children(storage), evicted_children)


def evicted_neighbourhood(storage: Storage) -> list[Storage]:
    """e*(t): the evicted ancestors and descendants (no storage is both: the graph has no
    cycle)."""
    return evicted_ancestors(storage) + evicted_descendants(storage)


def total_cost(storages: list[Storage]) -> float:
    """The summed cost of ``storages``. The built-in cost models give costs that add up
    exactly (whole nanoseconds, or flops/32 + bytes/8), so the order of the sum does not
    change the result, and the cached closures of ``fast/`` give the same float."""
    return sum((s.cost for s in storages), 0.0)


def estar_cost(storage: Storage) -> float:
    """c(e*(t)) (h_DTR's neighbourhood term)."""
    return total_cost(evicted_ancestors(storage)) + total_cost(evicted_descendants(storage))


def ancestors_cost(storage: Storage) -> float:
    """The cost of the evicted ancestors (h_MSPS's term, from Capuchin)."""
    return total_cost(evicted_ancestors(storage))


class WalkedNeighbourhood:
    """The neighbourhood terms by walking the graph at every score: nothing to keep up to
    date (``fast/closures.py`` keeps closures instead, with the same interface)."""

    def estar_cost(self, storage: Storage) -> float:
        return estar_cost(storage)

    def ancestors_cost(self, storage: Storage) -> float:
        return ancestors_cost(storage)

    def descendant_ids(self, storage: Storage) -> list[int]:
        return [s.id for s in evicted_descendants(storage)]

    def on_evicted(self, storage: Storage) -> None:
        """``storage`` was evicted: nothing is cached."""

    def on_change(self, storage: Storage) -> None:
        """``storage`` left the evicted set (rebuilt, banished or freed): nothing is
        cached."""

    def invalidate_all(self) -> None:
        """Nothing is cached."""

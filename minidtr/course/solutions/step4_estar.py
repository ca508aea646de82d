"""Step 4: e* as a walk (a reference solution).

Evicting a resident storage t makes it one more evicted node of the graph. Its
*evicted ancestors* (reachable through evicted parents) would be rebuilt first
when t is rebuilt; its *evicted descendants* (reachable through evicted children)
would need t to be rebuilt. e*(t) is both; h_DTR charges t their cost.
"""

from __future__ import annotations

from collections.abc import Callable

from minidtr.runtime.storage import Storage


def is_evicted(storage: Storage) -> bool:
    """Evicted and not banished: a value that may be recomputed."""
    return storage.buffer is None and not storage.banished


def walk(start: Storage, step: Callable[[Storage], list[Storage]]) -> list[Storage]:
    """The evicted storages reachable from ``start`` by ``step`` (not ``start``), once each."""
    found: dict[int, Storage] = {}
    stack = [s for s in step(start) if is_evicted(s)]
    while stack:
        storage = stack.pop()
        if storage.id not in found:
            found[storage.id] = storage
            stack.extend(s for s in step(storage) if is_evicted(s))
    return list(found.values())


def evicted_ancestors(storage: Storage) -> list[Storage]:
    """What rebuilding ``storage`` would rebuild first."""
    return walk(storage, lambda s: list(s.parents))


def evicted_descendants(storage: Storage) -> list[Storage]:
    """What would need ``storage`` to be rebuilt."""
    return walk(storage, lambda s: s.live_children())


def estar_cost(storage: Storage) -> float:
    """c(e*(t)): the summed cost of the evicted ancestors and descendants."""
    neighbourhood = evicted_ancestors(storage) + evicted_descendants(storage)
    return sum((s.cost for s in neighbourhood), 0.0)

"""Evicted neighbourhoods: the ``c(e*(t))`` term of h_DTR and its union-find approximation.

Evicting a resident storage ``t`` means that rematerializing it later also
recomputes every evicted storage connected to it through evicted storages
(parents and children both). Those storages form connected components of the
evicted subgraph, so ``e*(t)`` is the union of the components adjacent to
``t`` and ``c(e*(t))`` the sum of their costs.

``EvictedComponents`` keeps those components as union-find classes whose root
carries the summed cost. An eviction *merges* the classes of the new storage's
evicted neighbours (near O(1)). What a rematerialization does depends on the
mode:

- ``"estar"`` (exact, h_DTR): the component may split, so its root is marked
  invalid and its pieces are relabelled by a walk the next time one of them is
  asked for. Only the touched component is walked, never the whole graph.
- ``"eq"`` (h_DTR^eq): the storage's cost is subtracted from its class and it
  leaves the class; links are never split (the paper's over-approximation).

Only the mode the active heuristic needs is maintained, and only while a
budget is in force; switching mode starts a new *epoch*, which makes every
existing label stale so that it is rebuilt lazily, on demand.
"""

from __future__ import annotations

from .storage import Storage

MODES = ("estar", "eq")


class Component:
    """A union-find node; the root carries its class's summed cost and size."""

    __slots__ = ("parent", "cost", "size", "valid", "epoch")

    def __init__(self, cost: float, size: int, epoch: int):
        self.parent: Component | None = None
        self.cost = cost
        self.size = size
        self.valid = True
        self.epoch = epoch

    def root(self) -> Component:
        node = self
        while node.parent is not None:
            if node.parent.parent is not None:
                node.parent = node.parent.parent  # path halving
            node = node.parent
        return node


def union(a: Component, b: Component) -> Component:
    """Merge two roots; the larger absorbs the smaller. Returns the new root."""
    if a is b:
        return a
    if a.size < b.size:
        a, b = b, a
    b.parent = a
    a.cost += b.cost
    a.size += b.size
    return a


def evicted_neighbours(storage: Storage) -> list[Storage]:
    return [n for n in storage.neighbours() if n.buffer is None and not n.banished]


class EvictedComponents:
    """Classes of evicted storages (``Storage.component``); see the module docstring."""

    def __init__(self):
        self.mode: str | None = None
        self.epoch = 0

    def set_mode(self, mode: str | None) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"unknown neighbourhood mode {mode!r}")
        if mode != self.mode:
            self.mode = mode
            self.epoch += 1

    def root_of(self, storage: Storage) -> Component:
        node = storage.component
        if node is not None:
            root = node.root()
            if root.valid and root.epoch == self.epoch:
                return root
        return self._relabel(storage)

    def _relabel(self, start: Storage) -> Component:
        root = Component(0.0, 0, self.epoch)
        stack = [start]
        start.component = root
        while stack:
            storage = stack.pop()
            root.cost += storage.cost
            root.size += 1
            for n in evicted_neighbours(storage):
                if n.component is not root:
                    n.component = root
                    stack.append(n)
        return root

    def on_evict(self, storage: Storage, evicted: list[Storage]) -> None:
        """``storage`` (still resident) is about to be evicted; ``evicted`` are its
        evicted neighbours."""
        if self.mode is None:
            return
        root = Component(storage.cost, 1, self.epoch)
        for n in evicted:
            root = union(root, self.root_of(n))
        storage.component = root

    def on_leave(self, storage: Storage) -> None:
        """``storage`` leaves the evicted set: rematerialized, banished or freed."""
        node = storage.component
        storage.component = None
        if self.mode is None or node is None:
            return
        root = node.root()
        if root.epoch != self.epoch or not root.valid:
            return
        if self.mode == "estar":
            root.valid = False
        else:
            root.cost -= storage.cost
            root.size -= 1

    def neighbourhood_cost(self, storage: Storage) -> float:
        """c(e*(t)) for a resident ``storage``: the cost of its adjacent evicted classes."""
        total = 0.0
        seen: list[Component] = []
        for n in evicted_neighbours(storage):
            root = self.root_of(n)
            if not any(root is r for r in seen):
                seen.append(root)
                total += root.cost
        return total


def brute_force_neighbourhood(storage: Storage) -> list[Storage]:
    """e*(t) by a full walk: the reference the incremental structure is tested against."""
    found: list[Storage] = []
    seen = {id(storage)}
    stack = evicted_neighbours(storage)
    while stack:
        s = stack.pop()
        if id(s) in seen:
            continue
        seen.add(id(s))
        found.append(s)
        stack.extend(evicted_neighbours(s))
    return found


def evicted_ancestors_cost(storage: Storage) -> float:
    """Cost of the evicted ancestors reachable through evicted parents (h_MSPS)."""
    total = 0.0
    seen: set[int] = set()
    stack = [p for p in storage.parents() if p.buffer is None]
    while stack:
        s = stack.pop()
        if id(s) in seen:
            continue
        seen.add(id(s))
        total += s.cost
        stack.extend(p for p in s.parents() if p.buffer is None)
    return total

"""Evicted neighbourhoods: the ``c(e*(t))`` term of h_DTR and its union-find approximation.

Evicting a resident storage ``t`` means that rematerializing it later also
recomputes every evicted storage connected to it through evicted storages
(parents and children both). Those storages form connected components of the
evicted subgraph, so ``e*(t)`` is the union of the components adjacent to
``t`` and ``c(e*(t))`` the sum of their costs.

``ExactComponents`` maintains those components incrementally: an eviction
*merges* the components of the new storage's evicted neighbours (union-find,
near O(1)); a rematerialization or the death of an evicted storage can *split*
a component, which is handled by marking its root invalid and relabelling the
pieces by a walk the next time one of them is asked for. Only the touched
component is ever walked, never the whole graph.

``EquivalenceClasses`` is the paper's h_DTR^eq: the same unions, but a
rematerialization only subtracts the storage's cost from its class and gives
it a fresh one; links are never split (a known over-approximation).
"""

from __future__ import annotations

from .storage import Storage


class Component:
    """A union-find node carrying the summed cost of its class at the root."""

    __slots__ = ("parent", "cost", "size", "valid")

    def __init__(self, cost: float = 0.0, size: int = 1):
        self.parent: Component | None = None
        self.cost = cost
        self.size = size
        self.valid = True

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


def sum_of_roots(roots: list[Component]) -> float:
    total = 0.0
    seen: list[Component] = []
    for root in roots:
        if not any(root is r for r in seen):
            seen.append(root)
            total += root.cost
    return total


class ExactComponents:
    """Exact connected components of evicted storages (``Storage.component``)."""

    def root_of(self, storage: Storage) -> Component:
        node = storage.component
        if node is not None:
            root = node.root()
            if root.valid:
                return root
        return self._relabel(storage)

    def _relabel(self, start: Storage) -> Component:
        root = Component(cost=0.0, size=0)
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

    def on_evict(self, storage: Storage) -> None:
        root = Component(cost=storage.cost)
        for n in evicted_neighbours(storage):
            root = union(root, self.root_of(n))
        storage.component = root

    def on_remat(self, storage: Storage) -> None:
        self.on_leave(storage)

    def on_leave(self, storage: Storage) -> None:
        """The storage leaves the evicted set (rematerialized, banished or freed)."""
        if storage.component is not None:
            storage.component.root().valid = False
            storage.component = None

    def neighbourhood_cost(self, storage: Storage) -> float:
        return sum_of_roots([self.root_of(n) for n in evicted_neighbours(storage)])


class EquivalenceClasses:
    """h_DTR^eq's union-find (``Storage.eq_class``): merges on eviction, never splits."""

    def on_evict(self, storage: Storage) -> None:
        root = Component(cost=storage.cost)
        for n in evicted_neighbours(storage):
            if n.eq_class is not None:
                root = union(root, n.eq_class.root())
        storage.eq_class = root

    def on_remat(self, storage: Storage) -> None:
        self.on_leave(storage)

    def on_leave(self, storage: Storage) -> None:
        if storage.eq_class is not None:
            storage.eq_class.root().cost -= storage.cost
            storage.eq_class = None

    def neighbourhood_cost(self, storage: Storage) -> float:
        roots = [n.eq_class.root() for n in evicted_neighbours(storage) if n.eq_class is not None]
        return sum_of_roots(roots)


def brute_force_neighbourhood(storage: Storage) -> list[Storage]:
    """e*(t) by a full walk: the reference the incremental structures are tested against."""
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

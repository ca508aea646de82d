"""h_DTR^eq: the evicted neighbourhood approximated by union-find classes.

Walking e*(t) for every candidate at every decision is what makes h_DTR dear.
The paper's cheaper variant keeps the evicted storages in *equivalence
classes*: connected evicted regions, each with the summed cost of its members.

- When a storage is evicted it gets a class of its own, which is merged with
  the class of every evicted neighbour (parents and children alike).
- When an evicted storage leaves the evicted set (rebuilt, banished, freed),
  its cost is taken out of its class, but the links it made stay: classes are
  never split. So c(eq(t)) may count storages that are no longer connected to
  ``t``: a documented over-approximation, which makes each update O(α(n)).
- c(eq(t)) for a resident ``t`` is the summed cost of the distinct classes of its
  evicted neighbours.

The classes are kept only while a heuristic uses them (``Eviction.track``);
switching them on starts a new *epoch*, and a class of an older epoch is
rebuilt from the graph when first asked for. ``listener`` (``fast/mirror.py``)
hears of every merge and cost change, so that the accelerated search can read
the classes as arrays.
"""

from __future__ import annotations

from .estar import evicted_children, evicted_parents
from .storage import Storage


class Component:
    """A union-find node; the root carries its class's summed cost and size."""

    __slots__ = ("parent", "cost", "size", "epoch", "index", "generation")

    def __init__(self, cost: float, size: int, epoch: int):
        self.parent: Component | None = None
        self.cost = cost
        self.size = size
        self.epoch = epoch
        self.index = -1  # the accelerator's mirror index (fast/mirror.py)
        self.generation = -1

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
    """Evicted parents, then evicted children (the order the classes are merged in)."""
    return evicted_parents(storage) + evicted_children(storage)


class EquivalenceClasses:
    """h_DTR^eq's classes of evicted storages (each storage's ``component``)."""

    def __init__(self):
        self.epoch = 1
        self.listener = None  # told of merges, cost changes and departures (fast/mirror.py)

    def invalidate_all(self) -> None:
        """Start a new epoch: every class is rebuilt from the graph when next asked for."""
        self.epoch += 1

    def root_of(self, storage: Storage) -> Component:
        node = storage.component
        if node is not None:
            root = node.root()
            if root.epoch == self.epoch:
                return root
        return self._rebuild(storage)

    def _rebuild(self, start: Storage) -> Component:
        """A class for ``start``'s connected evicted region (after a new epoch)."""
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

    def on_evict(self, storage: Storage) -> None:
        """``storage`` (still resident) is about to be evicted: its class is its own,
        merged with each evicted neighbour's."""
        root = Component(storage.cost, 1, self.epoch)
        listener = self.listener
        for n in evicted_neighbours(storage):
            other = self.root_of(n)
            merged = union(root, other)
            if other is not root and listener is not None:
                listener.on_union(merged, other if merged is root else root)
            root = merged
        storage.component = root

    def on_leave(self, storage: Storage) -> None:
        """``storage`` leaves the evicted set: its cost leaves its class, its links stay."""
        node, storage.component = storage.component, None
        if node is not None:
            root = node.root()
            if root.epoch == self.epoch:
                root.cost -= storage.cost
                root.size -= 1
                if self.listener is not None:
                    self.listener.on_cost(root)
        if self.listener is not None:
            self.listener.on_left(storage)

    def cost(self, storage: Storage) -> float:
        """c(eq(t)): the summed cost of the distinct classes of t's evicted neighbours."""
        return self.cost_around(evicted_neighbours(storage))

    def cost_around(self, evicted: list[Storage]) -> float:
        total = 0.0
        seen: list[Component] = []
        for n in evicted:
            root = self.root_of(n)
            if not any(root is r for r in seen):
                seen.append(root)
                total += root.cost
        return total

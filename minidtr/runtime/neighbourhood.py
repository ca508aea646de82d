"""Evicted neighbourhoods: the ``c(e*(t))`` term of h_DTR and its union-find approximation.

For a resident storage ``t``, ``e*(t)`` is what evicting ``t`` would force to be
recomputed: its *evicted ancestors* (reachable through evicted parents: they
must be rebuilt to rebuild ``t``) and its *evicted descendants* (reachable
through evicted children: they need ``t`` to be rebuilt).

``EvictedNeighbourhood`` keeps, for each evicted storage, the closure of its
evicted ancestors ("above") and of its evicted descendants ("below"), as sets
with their summed cost, computed lazily and cached. ``e*(t)`` is then the union
of the closures of ``t``'s evicted parents and children. When a storage is
evicted, rematerialized or freed, only the caches that can see it are
invalidated: a walk from it through evicted storages that stops at caches
already invalid (an invalid cache's descendants, resp. ancestors, are invalid
too, so the walk never needs to go further). No score walks the graph.

A set of up to ``SMALL`` storages is a {storage id: cost} map; a larger one is a
Python int used as a bitset over indices the storages in it get, so that closing
over a neighbour is one ``|`` in C. A long run of evicted values has closures as
long as the run, and a change rebuilds all those below it: the backward pass of a
deep chain or a Tree-LSTM built some 90 million dict entries in two steps when
every set was a map. Small sets stay maps because a bitset is as long as its
highest index: with a hundred thousand evicted storages about, even a set of one
would take 12 KB. A storage gives its index back when it changes (is evicted,
rebuilt or freed), when every closure that held it has just been dropped, so the
indices in use stay about as many as the storages in large closures; past
``MAX_BITS`` with none given back, they start again from 0 with a new epoch.

``EquivalenceClasses`` is the paper's h_DTR^eq: evicted storages form union-find
classes whose root carries the summed cost; an eviction merges the classes of
the new storage's evicted neighbours (parents and children alike, undirected),
a rematerialization subtracts the storage's cost from its class and takes it
out; links are never split (a documented over-approximation).

Only the structure the active heuristic needs is maintained, and only while a
budget is in force; switching it on starts a new *epoch*, which makes every
cached value stale so that it is rebuilt lazily from the graph.
"""

from __future__ import annotations

import numpy as np

from .storage import Storage

MODES = ("estar", "eq")
SMALL = 256  # members a closure holds as a map; past that, as a bitset
MAX_BITS = 1 << 16  # indices handed out before they start again (a new epoch)
FEW_BITS = 32  # up to this many new members, their costs are added one by one


def evicted_neighbours(storage: Storage) -> list[Storage]:
    return [n for n in storage.neighbours() if n.buffer is None and not n.banished]


def evicted_parents(storage: Storage) -> list[Storage]:
    return [p for p in storage.parents if p.buffer is None and not p.banished]


def evicted_children(storage: Storage) -> list[Storage]:
    return [c for c in storage.live_children() if c.buffer is None and not c.banished]


# ---- h_DTR: directional, exact --------------------------------------------------------------


class EvictedNeighbourhood:
    """Exact ``c(e*(t))`` from cached closures (``Storage.above`` / ``Storage.below``)."""

    def __init__(self):
        self.epoch = 1
        self.on_dropped = None  # called with each storage whose closures are dropped
        self.bit_of: dict[int, int] = {}  # storage id -> its index in the bitsets
        self.ids: list[int] = []  # index -> storage id (-1: free)
        self.free: list[int] = []  # indices given back
        self.costs = np.zeros(64)  # index -> the storage's cost when it was closed over
        self.costs_at = memoryview(self.costs)

    def invalidate_all(self) -> None:
        """Make every closure stale (the indices stay: a closure being built still reads
        its neighbours' bitsets)."""
        self.epoch += 1

    def _check_indices(self) -> None:
        """Past ``MAX_BITS`` indices with none given back, hand them out from 0 again, with
        a new epoch so that no valid closure holds one. Checked where closures are asked
        for, never between two closures that are merged."""
        if len(self.ids) >= MAX_BITS and not self.free:
            self.invalidate_all()
            self.bit_of.clear()
            self.ids.clear()

    def cost(self, storage: Storage) -> float:
        """c(e*(t)) for a resident storage: its evicted ancestors and descendants."""
        return self.cost_around(evicted_parents(storage), evicted_children(storage))

    def cost_around(self, parents: list[Storage], children: list[Storage]) -> float:
        """``cost`` of a storage given its evicted parents and children."""
        return self._union_cost(parents, "above") + self._union_cost(children, "below")

    def _union_cost(self, storages: list[Storage], side: str) -> float:
        if not storages:
            return 0.0
        self._check_indices()
        closures = [self._closure(s, side) for s in storages]
        if len(closures) == 1:
            return closures[0][2]
        members, _, total = self._merged(closures)
        return sum(members.values()) if members is not None else total

    def closure_ids(self, storage: Storage, side: str) -> list[int]:
        """The ids in the cached closure of an evicted storage: itself and its evicted
        ancestors (``"above"``) or descendants (``"below"``)."""
        self._check_indices()
        _, members, _, bits = self._closure(storage, side)
        if members is not None:
            return list(members)
        ids, found = self.ids, []
        while bits:
            low = bits & -bits
            found.append(ids[low.bit_length() - 1])
            bits ^= low
        return found

    def _valid(self, closure) -> bool:
        return closure is not None and closure[0] == self.epoch

    def _closure(self, storage: Storage, side: str):
        """[epoch, {id: cost} or None, total cost, bitset or None] of ``storage`` and its
        evicted ancestors (``above``) or descendants (``below``), a map while it has at
        most ``SMALL`` members and a bitset past that (a map's bitset too, once it was
        merged with one); computed bottom-up with an explicit stack."""
        step = evicted_parents if side == "above" else evicted_children
        stack = [storage]
        while stack:
            node = stack[-1]
            if self._valid(getattr(node, side)):
                stack.pop()
                continue
            neighbours = step(node)
            missing = [n for n in neighbours if not self._valid(getattr(n, side))]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            # the node is in none of its neighbours' closures: the graph has no cycle
            members, bits, total = self._merged([getattr(n, side) for n in neighbours])
            if members is not None:  # the total as the sum of the map, as ``_union_cost``
                members[node.id] = node.cost
                total = sum(members.values())
                if len(members) > SMALL:
                    members, bits = None, self._bits_of(members)
            else:
                bits |= self._bit(node.id, node.cost)
                total += node.cost
            setattr(node, side, [self.epoch, members, total, bits])
        return getattr(storage, side)

    def _merged(self, closures: list[list]) -> tuple[dict | None, int | None, float]:
        """(members, bits, total) of the union of closures, each member's cost once: a new
        map while the closures are maps and the union has at most ``SMALL`` members (the
        caller sums it), else a bitset and its total."""
        members: dict[int, float] = {}
        for closure in closures:
            if closure[1] is None:
                break
            members.update(closure[1])
        else:
            if len(members) <= SMALL:
                return members, None, 0.0
        bits, total = 0, 0.0
        for closure in closures:
            more = closure[3]
            if more is None:  # a map merged with a bitset: its bits, kept for next time
                more = closure[3] = self._bits_of(closure[1])
            if not bits:
                bits, total = more, closure[2]
                continue
            new = more & ~bits
            if new:
                bits |= new
                total += self._summed(new)
        return None, bits, total

    def _bits_of(self, members: dict[int, float]) -> int:
        bits = 0
        for storage_id, cost in members.items():
            bits |= self._bit(storage_id, cost)
        return bits

    def _summed(self, bits: int) -> float:
        """The summed cost of the storages in a bitset: one by one when they are few, as
        one NumPy sum over the set bits when many."""
        if bits.bit_count() <= FEW_BITS:
            total, costs = 0.0, self.costs_at
            while bits:
                low = bits & -bits
                total += costs[low.bit_length() - 1]
                bits ^= low
            return total
        raw = np.frombuffer(bits.to_bytes((bits.bit_length() + 7) // 8, "little"), np.uint8)
        members = np.unpackbits(raw, bitorder="little").view(bool)
        return float(self.costs[: members.size][members].sum())

    def _bit(self, storage_id: int, cost: float) -> int:
        """A storage's bit, recording its cost (an index is handed out the first time the
        storage is in a bitset, and given back when it changes: ``on_change``)."""
        index = self.bit_of.get(storage_id)
        if index is None:
            if self.free:
                index = self.free.pop()
                self.ids[index] = storage_id
            else:
                index = len(self.ids)
                self.ids.append(storage_id)
                if index >= self.costs.size:
                    self.costs = np.concatenate([self.costs, np.zeros(self.costs.size)])
                    self.costs_at = memoryview(self.costs)
            self.bit_of[storage_id] = index
        self.costs_at[index] = cost
        return 1 << index

    def on_change(self, storage: Storage) -> None:
        """``storage`` was evicted, rematerialized, banished or freed: drop the caches that
        may include it (those of evicted storages connected to it in either direction)."""
        storage.above = storage.below = None
        if self.on_dropped is not None:
            self.on_dropped(storage)
        self._invalidate(evicted_children(storage), "above", evicted_children)
        self._invalidate(evicted_parents(storage), "below", evicted_parents)
        index = self.bit_of.pop(storage.id, None)
        if index is not None:  # no valid closure holds it now: the walks dropped them
            self.ids[index] = -1
            self.free.append(index)

    def _invalidate(self, start: list[Storage], side: str, step) -> None:
        stack = start
        dropped = self.on_dropped
        while stack:
            node = stack.pop()
            if self._valid(getattr(node, side)):
                setattr(node, side, None)
                if dropped is not None:
                    dropped(node)
                stack.extend(step(node))


# ---- h_DTR^eq: undirected union-find -----------------------------------------------------------


class Component:
    """A union-find node; the root carries its class's summed cost and size."""

    __slots__ = ("parent", "cost", "size", "epoch", "index", "generation")

    def __init__(self, cost: float, size: int, epoch: int):
        self.parent: Component | None = None
        self.cost = cost
        self.size = size
        self.epoch = epoch
        self.index = -1  # in ClassMirror's arrays, valid while ``generation`` is current
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


class ClassMirror:
    """The union-find classes in NumPy arrays, so that the classes of many components and
    their costs are read at once. A component gets an *index* when first asked for
    (``index_of``); every mirrored component's class has a *label*, the index of one of
    its members, and ``label[index]`` is always the label of the component's class (no
    path to walk: when two mirrored classes merge, the members of the one with fewer
    mirrored members are relabelled, so each index is relabelled O(log n) times).
    ``cost[label]`` is the class's summed cost, kept up to date by
    ``EquivalenceClasses``; ``touched`` collects the labels whose cost or
    members changed, and ``merged`` each label that a merge retired, in order, with
    the label its members took (``(retired, kept)``; a retired label never returns
    until a reset), which the candidate table takes at each decision. Index 0 is
    *none*, a class of cost 0.0 (padding). ``reset`` forgets every index (they are
    handed out afresh)."""

    def __init__(self):
        self.generation = 0
        self.size = 1
        self.label = np.zeros(64, np.int64)
        self.cost = np.zeros(64)
        self.members: dict[int, list[int]] = {}  # label -> the indices it labels
        self.touched: set[int] = set()
        self.merged: list[tuple[int, int]] = []
        self._bind()

    def _bind(self) -> None:
        """Memoryviews of ``label`` and ``cost`` for reading a few scalars (the candidate
        table's row-by-row path), at under half NumPy's cost per scalar."""
        self.label_at = memoryview(self.label)
        self.cost_at = memoryview(self.cost)

    def reset(self) -> None:
        self.generation += 1
        self.size = 1
        self.members = {}
        self.touched = set()
        self.merged = []

    def mirrored(self, node: Component) -> bool:
        return node.generation == self.generation

    def _add(self, node: Component, label: int) -> int:
        """Give ``node`` the next index, in the class labelled ``label`` (-1: its own)."""
        if self.size == len(self.label):
            grow = max(64, self.size)
            self.label = np.concatenate([self.label, np.zeros(grow, np.int64)])
            self.cost = np.concatenate([self.cost, np.zeros(grow)])
            self._bind()
        index = self.size
        self.size += 1
        node.index, node.generation = index, self.generation
        if label < 0:
            label = index
            self.members[index] = [index]
            self.cost_at[index] = node.cost
        else:
            self.members[label].append(index)
        self.label_at[index] = label
        return index

    def index_of(self, node: Component) -> int:
        """``node``'s index, mirroring it (and its root, if need be) on first use."""
        if node.generation == self.generation:
            return node.index
        root = node.root()
        if root.generation != self.generation:
            self._add(root, -1)
        if root is node:
            return node.index
        return self._add(node, self.label_at[root.index])

    def on_union(self, merged: Component, absorbed: Component) -> None:
        """``absorbed``'s class was merged into root ``merged``'s (``merged.cost`` is the sum)."""
        current = self.generation
        if absorbed.generation == current:
            gone = self.label_at[absorbed.index]
            if merged.generation != current:
                self._add(merged, gone)
                keep = gone
            else:
                keep = self.label_at[merged.index]
                self.touched.add(keep)
                moved = self.members.pop(gone)
                kept = self.members[keep]
                retired = gone
                if len(moved) > len(kept):
                    retired = keep
                    keep, moved, kept = gone, kept, moved
                    self.members[gone] = kept
                    del self.members[retired]
                self.label[moved] = keep
                kept.extend(moved)
                self.merged.append((retired, keep))
            self.touched.add(gone)
        elif merged.generation == current:
            keep = self.label_at[merged.index]
        else:
            return
        self.touched.add(keep)
        self.cost_at[keep] = merged.cost

    def on_cost(self, root: Component) -> None:
        """Root ``root``'s class changed cost."""
        if root.generation == self.generation:
            label = self.label_at[root.index]
            self.cost_at[label] = root.cost
            self.touched.add(label)

    def labels(self, indices: np.ndarray) -> np.ndarray:
        """The class label of each mirrored index, in an array shaped like ``indices``."""
        return self.label[indices]


class EquivalenceClasses:
    """h_DTR^eq's classes of evicted storages (``Storage.component``)."""

    def __init__(self):
        self.epoch = 1
        self.mirror = ClassMirror()
        self.on_neighbours_changed = None  # called with a storage leaving the evicted set

    def invalidate_all(self) -> None:
        self.epoch += 1

    def root_of(self, storage: Storage) -> Component:
        node = storage.component
        if node is not None:
            root = node.root()
            if root.epoch == self.epoch:
                return root
        return self._rebuild(storage)

    def _rebuild(self, start: Storage) -> Component:
        """A class for ``start``'s connected evicted region, built after a mode switch."""
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
        """``storage`` (still resident) is about to be evicted."""
        root = Component(storage.cost, 1, self.epoch)
        mirror = self.mirror
        for n in evicted_neighbours(storage):
            other = self.root_of(n)
            merged = union(root, other)
            if other is not root:
                mirror.on_union(merged, other if merged is root else root)
            root = merged
        storage.component = root

    def on_leave(self, storage: Storage) -> None:
        """``storage`` leaves the evicted set (rematerialized, banished or freed): its cost
        leaves its class, but the links it made stay."""
        node, storage.component = storage.component, None
        if node is not None:
            root = node.root()
            if root.epoch == self.epoch:
                root.cost -= storage.cost
                root.size -= 1
                self.mirror.on_cost(root)
        if self.on_neighbours_changed is not None:
            self.on_neighbours_changed(storage)

    def cost(self, storage: Storage) -> float:
        return self.cost_around(evicted_neighbours(storage))

    def cost_around(self, evicted: list[Storage]) -> float:
        """``cost`` of a storage given its evicted neighbours (parents first)."""
        total = 0.0
        seen: list[Component] = []
        for n in evicted:
            root = self.root_of(n)
            if not any(root is r for r in seen):
                seen.append(root)
                total += root.cost
        return total


# ---- references for tests and the other heuristics --------------------------------------------


def _walk(start: list[Storage], step) -> list[Storage]:
    found: dict[int, Storage] = {}
    stack = list(start)
    while stack:
        s = stack.pop()
        if s.id not in found:
            found[s.id] = s
            stack.extend(step(s))
    return list(found.values())


def evicted_ancestors(storage: Storage) -> list[Storage]:
    return _walk(evicted_parents(storage), evicted_parents)


def evicted_descendants(storage: Storage) -> list[Storage]:
    return _walk(evicted_children(storage), evicted_children)


def brute_force_neighbourhood(storage: Storage) -> list[Storage]:
    """e*(t) by full walks: the reference the cached structure is tested against."""
    return evicted_ancestors(storage) + evicted_descendants(storage)


def evicted_ancestors_cost(storage: Storage) -> float:
    """Cost of the evicted ancestors (h_MSPS's term)."""
    return sum(s.cost for s in evicted_ancestors(storage))


def neighbourhood_term(mode: str, allocator, storage: Storage) -> float | None:
    """The neighbourhood part of cost term ``mode`` (``heuristics.NEIGHBOURHOOD_COST``) of a
    resident storage, by the same arithmetic, or None when no neighbour is evicted (the
    term is then 0.0). Reads the neighbours once (the candidate table's fast path)."""
    parents = evicted_parents(storage)
    children = evicted_children(storage)
    if not parents and not children:
        return None
    if mode == "estar":
        return allocator.neighbourhood.cost_around(parents, children)
    if mode == "eq":
        return allocator.eq_classes.cost_around(parents + children)
    return sum(s.cost for s in _walk(parents, evicted_parents))

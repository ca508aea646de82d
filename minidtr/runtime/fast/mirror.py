"""Accelerates the reads of ``eqclasses.EquivalenceClasses``: the union-find classes as
arrays, so that a decision reads the classes of many candidates' neighbours at once.

The mirror listens to the classes (``EquivalenceClasses.listener``): every merge
and cost change is applied to its arrays as it happens, so they always say what
``root_of(...).cost`` would. Equivalent by construction: a label per class, and
the class's summed cost at that label, updated by the same additions.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..eqclasses import Component
from ..storage import Storage

GENERATIONS = itertools.count(1)  # unique across mirrors: a component is mirrored by one


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

    def __init__(self, table=None):
        self.table = table  # told when a storage leaves the evicted set (``on_left``)
        self.generation = next(GENERATIONS)
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
        self.generation = next(GENERATIONS)
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

    def on_left(self, storage: Storage) -> None:
        """``storage`` left the evicted set: take it out of its neighbours' rows (while
        the candidate table keeps h_DTR^eq's edges)."""
        table = self.table
        if table is not None and table.watching == "eq":
            border_left(table, storage)


from .borders import border_left  # noqa: E402

"""The paper's simulator's evicted neighbourhoods, kept the way it keeps them (``as_prototype``).

h_DTR's e* and h_MSPS's ancestors are, in the simulator, two *regions* per resident storage,
kept incrementally rather than walked at every score:

- a storage's forward region is the set of evicted storages reachable from it through
  evicted children (with their summed cost) and the *frontier*, the resident storages
  where that walk stops; the backward region likewise through parents;
- when a storage is evicted, each storage on its backward frontier absorbs it (and its
  forward region) into its forward region, and each storage on its forward frontier into
  its backward region; its own regions are cleared;
- when storages are computed or rebuilt, their regions are walked afresh, and so are the
  regions of the storages on their frontiers.

Between those events a region is not updated, and one thing makes that visible: the
simulator adds an op's outputs to its graph when the op is asked for, before it rebuilds
the op's evicted inputs. Until the op has run they are storages not yet computed, so a
region walked meanwhile (a rebuild's) counts them as evicted, at the op's cost, while a
region walked before does not. ``Pending`` stands for such an output, registered as a child
of the op's inputs from ``op_started`` to ``op_done``.

``SimulatorRegions`` has the interface of ``estar.WalkedNeighbourhood`` (the eviction
manager's ``neighbourhood``); ``prototype.py`` installs it in the mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .storage import Storage


class Pending:
    """An output of the op being run, in the graph before it is computed."""

    __slots__ = ("parents", "cost")
    buffer = None  # never resident

    def __init__(self, parents: Sequence[Storage], cost: float):
        self.parents = parents
        self.cost = cost


class Region:
    """The evicted storages reachable from ``base`` in one direction, their summed cost
    and the resident storages where the walk stopped."""

    __slots__ = ("base", "forward", "interior", "frontier", "compute")

    def __init__(self, base: Storage, forward: bool):
        self.base = base
        self.forward = forward
        self.interior: set = set()
        self.frontier: set = set()
        self.compute = 0.0


class SimulatorRegions:
    """Owns the regions of the storages, the pending outputs of the op being run and the
    storages computed or rebuilt whose regions are to be walked afresh (``batch``)."""

    def __init__(self):
        self.regions: dict[tuple[Any, bool], Region] = {}
        self.pending: dict[Any, list[Pending]] = {}  # an input -> the pending outputs
        self.current: list[Pending] = []
        self.batch: list[Storage] = []

    # ---- the graph the walks see ----------------------------------------------------------

    def children(self, node: Any) -> list:
        if type(node) is Pending:
            return []
        return [*node.live_children(), *self.pending.get(node, ())]

    def region(self, storage: Any, forward: bool) -> Region:
        region = self.regions.get((storage, forward))
        if region is None:  # first asked for: walked from the graph as it is
            region = self.walk(storage, forward)
        return region

    def walk(self, base: Any, forward: bool) -> Region:
        """The region of ``base`` walked afresh (the simulator's ``Region.rebuild``)."""
        region = Region(base, forward)
        stack = [base]
        while stack:
            node = stack.pop()
            for other in self.children(node) if forward else node.parents:
                if other.buffer is not None:
                    if other is not base:
                        region.frontier.add(other)
                    continue
                if other not in region.interior:
                    region.compute += other.cost
                    region.interior.add(other)
                    stack.append(other)
        self.regions[(base, forward)] = region
        return region

    # ---- the neighbourhood interface ----------------------------------------------------

    def estar_cost(self, storage: Storage) -> float:
        return self.region(storage, True).compute + self.region(storage, False).compute

    def ancestors_cost(self, storage: Storage) -> float:
        return self.region(storage, False).compute

    def descendant_ids(self, storage: Storage) -> list[int]:
        interior = self.region(storage, True).interior
        return [s.id for s in interior if type(s) is not Pending]

    def on_evicted(self, storage: Storage) -> None:
        """``storage`` was evicted: absorbed now."""
        self.evicted(storage)

    def on_change(self, storage: Storage) -> None:
        """``storage`` left the evicted set: became resident (walked at ``flush``), or was
        freed or banished while evicted (absorbed as an eviction, as it always was)."""
        if storage.buffer is None:
            self.evicted(storage)
        else:
            self.batch.append(storage)

    def invalidate_all(self) -> None:
        self.regions.clear()

    # ---- the simulator's updates ----------------------------------------------------------

    def evicted(self, storage: Storage) -> None:
        forward, backward = self.region(storage, True), self.region(storage, False)
        for other in list(backward.frontier):
            self.absorb(self.region(other, True), storage, forward)
        for other in list(forward.frontier):
            self.absorb(self.region(other, False), storage, backward)
        self.regions.pop((storage, True), None)
        self.regions.pop((storage, False), None)

    @staticmethod
    def absorb(region: Region, storage: Storage, its: Region) -> None:
        """``storage``, on ``region``'s frontier, was evicted: it and ``its`` region of the
        same direction join ``region``'s interior (counted as the simulator counts them)."""
        region.frontier.discard(storage)
        region.frontier |= its.frontier
        joining = its.interior - region.interior
        joining.add(storage)
        region.compute += sum(s.cost for s in joining)
        region.interior |= joining

    def flush(self) -> None:
        """Walk afresh the regions of the storages computed or rebuilt, then those of the
        storages on their frontiers."""
        batch, self.batch = self.batch, []
        forward: dict = {}
        backward: dict = {}
        for storage in batch:
            if storage.buffer is None:
                continue
            forward.update(dict.fromkeys(self.walk(storage, False).frontier))
            backward.update(dict.fromkeys(self.walk(storage, True).frontier))
        for storage in forward:
            self.walk(storage, True)
        for storage in backward:
            self.walk(storage, False)

    def op_started(self, parents: Sequence[Storage], outputs: int, cost: float) -> None:
        """An op is asked for: its outputs join the graph, not computed yet."""
        self.current = [Pending(parents, cost) for _ in range(outputs)]
        for parent in parents:
            self.pending.setdefault(parent, []).extend(self.current)

    def op_done(self, made: Sequence[Storage]) -> None:
        """The op ran (or failed): its pending outputs leave the graph; the storages it
        ``made`` and the regions around them are walked afresh."""
        nodes, self.current = self.current, []
        around: dict = {}
        for node in nodes:
            around.update(dict.fromkeys(self.walk(node, False).frontier))
            self.regions.pop((node, False), None)
        for parent in {id(p): p for node in nodes for p in node.parents}.values():
            left = [n for n in self.pending.get(parent, ()) if n not in nodes]
            if left:
                self.pending[parent] = left
            else:
                self.pending.pop(parent, None)
        self.batch.extend(made)
        self.flush()
        for storage in around:
            if storage.buffer is not None:
                self.walk(storage, True)

"""Accelerates ``estar.estar_cost``: c(e*(t)) from cached closures instead of walks.

For each evicted storage the closure of its evicted ancestors ("above") and of its
evicted descendants ("below") is kept, as a set with its summed cost, computed
lazily and cached on the storage (``Storage.above`` / ``Storage.below``). ``e*(t)``
is then the union of the closures of ``t``'s evicted parents and children. When a
storage is evicted, rematerialized or freed, only the caches that can see it are
invalidated: a walk from it through evicted storages that stops at caches already
invalid (an invalid cache's descendants, resp. ancestors, are invalid too, so the
walk never needs to go further). No score walks the graph.

Equivalent to the walk: a closure is exactly the set the walk reaches, each member's
cost counted once, and costs that are multiples of 1/32 (every built-in cost model's:
``estar.total_cost``) add up exactly while their sum stays below 2**48, so the sum is
the same float whatever its order. A cost of another kind (a cost function of the
user's, a trace's times with fractions) makes the sums depend on their order; from the
first such cost on (``exact``), a term is the walk's sum, in the walk's order, and the
closures are still kept, for the rows they flag.

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
Epochs are unique across instances (``EPOCHS``), so a closure cached by one never
passes for valid in another.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from .. import estar
from ..storage import Storage

SMALL = 256  # members a closure holds as a map; past that, as a bitset
MAX_BITS = 1 << 16  # indices handed out before they start again (a new epoch)
FEW_BITS = 32  # up to this many new members, their costs are added one by one
MAX_PENDING = 4096  # evictions announced late, at most (``on_evicted``)
GRID = 32.0  # costs that are whole multiples of 1/GRID ...
EXACT_BELOW = 2.0**48  # ... add up exactly in any order while their sum is below this
EPOCHS = itertools.count(1)


def evicted_parents(storage: Storage) -> list[Storage]:
    """``estar.evicted_parents``, with ``is_evicted`` inlined (a loop: under CPython 3.11
    a list comprehension is a function of its own, made and called each time)."""
    owner = storage.allocator
    found = []
    for parent in storage.parents:
        if parent.buffer is None and not parent.banished and parent.allocator is owner:
            found.append(parent)
    return found


def evicted_children(storage: Storage) -> list[Storage]:
    """``estar.evicted_children``, reading the children's weak references in place (the
    reference builds the list of live children first and prunes the dead ones)."""
    children = storage.children
    if type(children) is not list:
        children = (children,) if children else ()
    owner = storage.allocator
    found = []
    for ref in children:
        child = ref()
        if (
            child is not None
            and child.buffer is None
            and not child.banished
            and child.allocator is owner
        ):
            found.append(child)
    return found


class Closure:
    """The evicted ancestors (or descendants) of an evicted storage, itself included, as of
    ``epoch``: a {storage id: cost} map (``members``, None past ``SMALL``) or a bitset
    (``bits``, also kept for a map once it was merged with one), and the summed cost."""

    __slots__ = ("epoch", "members", "total", "bits")

    def __init__(self, epoch: int, members: dict | None, total: float, bits: int | None):
        self.epoch, self.members, self.total, self.bits = epoch, members, total, bits


class CachedClosures:
    """Exact ``c(e*(t))`` from cached closures (``Storage.above`` / ``Storage.below``)."""

    def __init__(self, eviction):
        self.eviction = eviction  # whose ``tracking`` says whether the closures are kept
        self.epoch = next(EPOCHS)
        self.flagged = None  # the candidate table whose rows next to each change get flagged
        self.bit_of: dict[int, int] = {}  # storage id -> its index in the bitsets
        self.ids: list[int] = []  # index -> storage id (-1: free)
        self.free: list[int] = []  # indices given back
        self.costs = np.zeros(64)  # index -> the storage's cost when it was closed over
        self.costs_at = memoryview(self.costs)
        self.pending: dict[int, weakref.ref[Storage]] = {}  # evictions not yet announced
        self.exact = True  # every cost closed over so far is on the grid (``cost_around``)

    def invalidate_all(self) -> None:
        """Make every closure stale (the indices stay: a closure being built still reads
        its neighbours' bitsets)."""
        self.epoch = next(EPOCHS)

    def _check_indices(self) -> None:
        """Past ``MAX_BITS`` indices with none given back, hand them out from 0 again, with
        a new epoch so that no valid closure holds one. Checked where closures are asked
        for, never between two closures that are merged."""
        if len(self.ids) >= MAX_BITS and not self.free:
            self.invalidate_all()
            self.bit_of.clear()
            self.ids.clear()

    def estar_cost(self, storage: Storage) -> float:
        """c(e*(t)) for a resident storage: its evicted ancestors and descendants (walked
        while the closures are not kept, as ``estar.estar_cost``)."""
        if self.eviction.tracking != "estar":
            return estar.estar_cost(storage)
        if self.pending:
            self.flush()
        return self.cost_around(evicted_parents(storage), evicted_children(storage))

    def ancestors_cost(self, storage: Storage) -> float:
        """h_MSPS's term, walked as the reference does (only ``above`` is cached, and only
        for h_DTR)."""
        return estar.ancestors_cost(storage)

    def descendant_ids(self, storage: Storage) -> list[int]:
        """Ids of the evicted descendants of a resident storage."""
        if self.eviction.tracking != "estar":
            return [s.id for s in estar.evicted_descendants(storage)]
        if self.pending:
            self.flush()
        return [i for c in evicted_children(storage) for i in self.closure_ids(c, "below")]

    def cost_around(self, parents: list[Storage], children: list[Storage]) -> float:
        """``cost`` of a storage given its evicted parents and children: from the closures
        while their sums are exact, else by the walks, in their order (``exact``)."""
        if self.pending:
            self.flush()
        total = self._union_cost(parents, "above") + self._union_cost(children, "below")
        if self.exact and total < EXACT_BELOW:
            return total
        walked = estar.walk(parents, evicted_parents), estar.walk(children, evicted_children)
        return estar.total_cost(walked[0]) + estar.total_cost(walked[1])

    def _union_cost(self, storages: list[Storage], side: str) -> float:
        if not storages:
            return 0.0
        self._check_indices()
        epoch = self.epoch
        closures = []
        for storage in storages:
            closure = getattr(storage, side)  # (a cached one without the call)
            closures.append(
                closure
                if closure is not None and closure.epoch == epoch
                else self._closure(storage, side)
            )
        if len(closures) == 1:
            return closures[0].total
        members, _, total = self._merged(closures)
        return sum(members.values()) if members is not None else total

    def closure_ids(self, storage: Storage, side: str) -> list[int]:
        """The ids in the cached closure of an evicted storage: itself and its evicted
        ancestors (``"above"``) or descendants (``"below"``)."""
        if self.pending:
            self.flush()
        self._check_indices()
        closure = self._closure(storage, side)
        members, bits = closure.members, closure.bits
        if members is not None:
            return list(members)
        ids, found = self.ids, []
        while bits:
            low = bits & -bits
            found.append(ids[low.bit_length() - 1])
            bits ^= low
        return found

    def _closure(self, storage: Storage, side: str) -> Closure:
        """The ``Closure`` of ``storage`` and its evicted ancestors (``above``) or
        descendants (``below``), a map while it has at most ``SMALL`` members and a bitset
        past that (a map's bitset too, once it was merged with one); computed bottom-up
        with an explicit stack."""
        step = evicted_parents if side == "above" else evicted_children
        epoch = self.epoch  # a closure is valid when it has this epoch
        exact = self.exact
        stack = [storage]
        waiting: dict[int, list[Storage]] = {}  # a node's neighbours, kept while theirs build
        while stack:
            node = stack[-1]
            closure = getattr(node, side)
            if closure is not None and closure.epoch == epoch:
                stack.pop()
                continue
            neighbours = waiting.pop(node.id, None)
            if neighbours is None:
                neighbours = step(node)
                missing = []
                for neighbour in neighbours:
                    closure = getattr(neighbour, side)
                    if closure is None or closure.epoch != epoch:
                        missing.append(neighbour)
                if missing:
                    waiting[node.id] = neighbours
                    stack.extend(missing)
                    continue
            stack.pop()
            cost = node.cost
            if exact and not (cost * GRID).is_integer():
                exact = self.exact = False
            # the node is in none of its neighbours' closures: the graph has no cycle
            if len(neighbours) == 1:  # a chain's link: its neighbour's map and the node
                only = getattr(neighbours[0], side)
                members = only.members
                if members is not None and len(members) < SMALL:
                    members = members.copy()
                    members[node.id] = cost
                    total = only.total + cost  # (what the sum of the map gives, when exact)
                    setattr(node, side, Closure(epoch, members, total, None))
                    continue
            elif not neighbours:
                setattr(node, side, Closure(epoch, {node.id: cost}, cost, None))
                continue
            closures = []
            for neighbour in neighbours:
                closures.append(getattr(neighbour, side))
            members, bits, total = self._merged(closures)
            if members is not None:  # the total as the sum of the map, as ``_union_cost``
                members[node.id] = cost
                total = sum(members.values())
                if len(members) > SMALL:
                    members, bits = None, self._bits_of(members)
            else:
                bits |= self._bit(node.id, cost)
                total += cost
            setattr(node, side, Closure(self.epoch, members, total, bits))
        return getattr(storage, side)

    def _merged(self, closures: list[Closure]) -> tuple[dict | None, int | None, float]:
        """(members, bits, total) of the union of closures, each member's cost once: a new
        map while the closures are maps and the union has at most ``SMALL`` members (the
        caller sums it), else a bitset and its total."""
        members: dict[int, float] = {}
        for closure in closures:
            if closure.members is None:
                break
            members.update(closure.members)
        else:
            if len(members) <= SMALL:
                return members, None, 0.0
        bits, total = 0, 0.0
        for closure in closures:
            more = closure.bits
            if more is None:  # a map merged with a bitset: its bits, kept for next time
                more = closure.bits = self._bits_of(closure.members)
            if not bits:
                bits, total = more, closure.total
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

    def on_evicted(self, storage: Storage) -> None:
        """``storage`` was evicted: what it changes is done at the next read (``flush``),
        or never if it is rebuilt, banished or freed before. A resident storage and then
        a gone (or again resident) one lie on no evicted path, so no closure and no term
        changed; most dead temporaries are freed so, soon after their eviction."""
        pending = self.pending
        pending[storage.id] = weakref.ref(storage)
        if len(pending) > MAX_PENDING:
            self.flush()

    def flush(self) -> None:
        """Announce the evictions still pending for the storages alive (``_drop_around``,
        both walks: the closures that stop at a newly evicted storage were valid)."""
        pending, self.pending = self.pending, {}
        for ref in pending.values():
            storage = ref()
            if storage is not None:
                self._drop_around(storage, True, True)

    def on_change(self, storage: Storage) -> None:
        """``storage`` left the evicted set (rematerialized, banished or freed): drop the
        caches that may include it (``_drop_around``). The flags and closures of a pending
        eviction (``on_evicted``) were never changed: leaving then undoes nothing. Its
        own closures say which walks can drop anything: a valid closure's evicted
        ancestors (``above``; descendants, ``below``) have valid closures too, since
        building it builds theirs and dropping theirs drops it; so when its own ``above``
        is not valid, no ``above`` closure below it is, and the walk through its
        children is skipped (and that through its parents when its ``below`` is not).
        Most storages leave with neither valid (on the Tree-LSTM at 0.3, 92%)."""
        if self.pending and self.pending.pop(storage.id, None) is not None:
            return
        epoch = self.epoch
        above, below = storage.above, storage.below
        self._drop_around(
            storage,
            above is not None and above.epoch == epoch,
            below is not None and below.epoch == epoch,
        )

    def _drop_around(self, storage: Storage, down: bool, up: bool) -> None:
        """Drop ``storage``'s closures and, walking from its evicted children (``down``)
        and parents (``up``), those that may include it, flagging the rows next to it in
        the ``flagged`` table, and next to each dropped closure those whose terms read
        it (``_invalidate``)."""
        storage.above = storage.below = None
        parents, children = self._evicted_parents(storage), self._evicted_children(storage)
        if children and down:
            self._invalidate(children, "above")
        if parents and up:
            self._invalidate(parents, "below")
        index = self.bit_of.pop(storage.id, None)
        if index is not None:  # no valid closure holds it now: the walks dropped them
            self.ids[index] = -1
            self.free.append(index)

    def _invalidate(self, start: list[Storage], side: str) -> None:
        """Drop the ``side`` closures that include the changed storage: from ``start``, its
        evicted children (``above``: their ancestors' closures) or parents (``below``), on
        through evicted storages while the closures are valid. A resident storage's term
        reads the ``above`` closures of its evicted parents and the ``below`` closures of
        its evicted children, so a dropped ``above`` closure flags the rows of the node's
        resident children, a ``below`` one those of its resident parents."""
        stack = start
        epoch = self.epoch
        onward = self._evicted_children if side == "above" else self._evicted_parents
        while stack:
            node = stack.pop()
            closure = getattr(node, side)
            if closure is not None and closure.epoch == epoch:
                setattr(node, side, None)
                stack.extend(onward(node))

    def _evicted_parents(self, storage: Storage) -> list[Storage]:
        """``evicted_parents``, flagging the rows of the resident parents in the ``flagged``
        table (rows past the frontier's length are flagged already)."""
        owner = storage.allocator
        table = self.flagged
        frontier = table.frontier if table is not None else None
        known = len(frontier) if frontier is not None else 0
        parents = []
        for parent in storage.parents:
            if parent.allocator is owner:
                if parent.buffer is None:
                    if not parent.banished:
                        parents.append(parent)
                elif parent.row < known:
                    frontier[parent.row] = 1
        return parents

    def _evicted_children(self, storage: Storage) -> list[Storage]:
        """``evicted_children``, flagging the rows of the resident children (as
        ``_evicted_parents``; the same loop written twice on purpose: one shared over a
        list of the dereferenced children cost a budgeted LSTM or Tree-LSTM step about
        1% more instructions)."""
        owner = storage.allocator
        table = self.flagged
        frontier = table.frontier if table is not None else None
        known = len(frontier) if frontier is not None else 0
        children = []
        refs = storage.children
        if type(refs) is not list:
            refs = (refs,) if refs else ()
        for ref in refs:
            child = ref()
            if child is not None and child.allocator is owner:
                if child.buffer is None:
                    if not child.banished:
                        children.append(child)
                elif child.row < known:
                    frontier[child.row] = 1
        return children

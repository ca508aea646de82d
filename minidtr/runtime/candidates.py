"""The eviction candidates as a table: score inputs in NumPy columns, one row per storage.

To the allocator ``CandidateTable`` is a set of storages that keeps insertion order
(used like a ``dict[Storage, None]``: ``table[s] = None``, ``table.pop(s, None)``,
``del``, ``in``, ``len``, iteration). Behind that, each candidate has a *row*
(``Storage.row``; 0 means "not a candidate") in columns of its cost, size, last
access and lock state, so that an eviction decision is a few array operations
(``eviction.py``) rather than a Python call per candidate.

Rows are appended and never reordered: a removed row becomes a hole, and holes are
squeezed out (keeping the order) when a decision is about to read the columns and they
pass an eighth of the candidates (and ``COMPACT_SLACK``), so a decision scans at most
about 9/8 of a row per candidate. (The allocator keeps a table only while a budget is
active: ``Allocator.listing``.) Between decisions holes are squeezed out only once they
outnumber the candidates (and ``LAZY_SLACK``): a backward pass frees two values per
node and a chain one per op, and squeezing at an eighth cost those a Python loop over
some 16 rows per removal; a slack of a thousand rows makes a small table's squeeze a
cost per thousand ops, not per sixty. So row order is insertion order, and the first
lowest score in row order is the candidate the reference loop would pick. A *blocked*
row (a hole, or a candidate seen locked) holds +inf in ``cost`` and ``unit`` (the "1"
of the cost term ``none``), so every score computed from them is +inf without a mask.

Keeping the columns true costs the allocator almost nothing per op. It does not
copy values; it marks rows *dirty* (``table.dirty[storage.row] = 1``, a byte write)
and ``sync`` re-reads the marked rows from their storages when a decision is
about to be made. The rule for code that changes a candidate's score inputs:

- ``last_access``, or ``locks`` going up: mark the row dirty before the next
  eviction decision can run (``Allocator._frame`` and ``_lock_one`` do);
- ``locks`` going down needs nothing: rows seen locked are re-read at every sync
  until they are seen unlocked;
- ``cost`` may change only while the storage is locked (a view op adds its cost
  to its locked base);
- inserting (``table[s] = None``) reads everything afresh.

``frontier`` flags rows whose neighbourhood term may have changed: new rows (rows
past its length count as flagged) and, while ``estar`` or ``ancestors`` is in use
(``watching`` names the cost term), the rows next to each storage that is evicted or
leaves the evicted set and the rows below (and, for ``estar``, above) it through
evicted storages, whose closures changed with it (``EvictedNeighbourhood``'s
invalidation walk; ``mark_descendants``). A decision recomputes the term of each
flagged row into ``term`` and clears the flag, so the other rows' terms are read from
the column.

Under ``eq`` each row keeps its evicted neighbours in ``edges``: the mirrored
union-find indices (``neighbourhood.ClassMirror``) of their nodes, parents then
children in the order ``Storage.neighbours`` gives, padded with 0 (the mirror's empty
class). ``edges[j, row]`` is the row's j-th: one contiguous array per position,
``edge_width`` of them in use. The changes keep them: each eviction puts the evicted
storage into its neighbours' rows and each storage leaving the evicted set takes
itself out (``border_evicted``, ``border_left``), at the place its order key in
``keys`` gives (a parent's place among the row's parents; ``CHILD_KEY`` plus a
child's id, since a storage's children are listed in the order they were made), and
list the rows in ``pending``. A flag here means "``edges`` is stale" (a new row, a
new epoch, a renumbering by compaction): the changes leave such a row alone, and a
decision re-reads its neighbours from the graph. ``labels`` holds the edges' class
labels as of the row's last ``term``, so that a decision recomputes the term of the
pending and re-read rows and of those naming a class that changed since (the
mirror's ``touched`` labels) only. ``bordering`` finds the latter without a scan:
each label to the rows whose ``labels`` name it (a superset: a row that became a
hole may stay listed until the next compaction, which drops the whole index, to be
rebuilt from the columns; ``eviction.Eviction._eq_terms`` keeps it).

``ratio`` holds each row's score before the staleness term, for the cost term and
size term a decision last asked for (``ratios``): ``(cost + term) / size`` (``cost``
for ``local``, ``unit`` for ``none``; no division without the size term), by the same
floating-point operations as ``Heuristic.scores``. ``rewritten`` lists the rows whose
``cost``, ``unit``, ``size`` or ``term`` were written since (``sync`` and the term
updates add to it, and a decision takes them all, so it is empty between decisions),
and ``ratios`` recomputes those only, or every row for another formula; a compaction
moves ``ratio`` with the other columns.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from math import inf
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .storage import Storage

_MISSING = object()
COMPACT_SLACK = 64  # holes tolerated beyond an eighth of the candidates before squeezing
COMPACT_SHIFT = 3  # ... an eighth: count >> COMPACT_SHIFT
LAZY_SLACK = 1024  # holes tolerated beyond the candidates' count between decisions
SYNC_ONE_BY_ONE = 32  # up to this many dirty rows, ``sync`` re-reads them one at a time
RATIOS_ONE_BY_ONE = 32  # up to this many rewritten rows, ``ratios`` updates them one at a time
CHILD_KEY = 1 << 40  # (eq) the order key of a child edge: this plus the child's id


class CandidateTable:
    # slots: a table has more attributes than CPython 3.11 shares the keys of in an
    # instance dict (30), and without them every attribute read and method call on it
    # would take the slow path
    __slots__ = (
        "storages",
        "count",
        "dirty",
        "frontier",
        "watching",
        "watched_epoch",
        "walked",
        "_locked",
        "_capacity",
        "cost",
        "unit",
        "nbytes",
        "size",
        "last_access",
        "active",
        "blocked",
        "term",
        "edges",
        "labels",
        "keys",
        "pending",
        "edge_width",
        "bordering",
        "ratio",
        "ratio_key",
        "rewritten",
        "scratch",
        "order",
        "cost_at",
        "unit_at",
        "nbytes_at",
        "size_at",
        "last_access_at",
        "term_at",
        "ratio_at",
        "active_at",
        "blocked_at",
        "edges_at",
        "labels_at",
        "keys_at",
        "listed_at",
        "relisted",
        "orphans_possible",
    )

    def __init__(self):
        self.storages: list[Storage | None] = [None]  # by row; row 0 is scratch
        self.count = 0
        self.dirty = bytearray(1)  # per row: re-read from the storage at the next sync
        self.frontier = bytearray(1)  # per row: its evicted neighbours may have changed
        self.watching: str | None = None  # the cost term the frontier flags serve
        self.watched_epoch = 0  # the union-find epoch ``edges`` refers to (``eq``)
        self.walked: weakref.WeakSet[Storage] = weakref.WeakSet()  # see ``mark_descendants``
        self._locked: list[int] = []  # rows seen locked at the last sync
        self._capacity = 0
        self.cost = np.zeros(0)  # +inf where blocked
        self.unit = np.zeros(0)  # 1.0, +inf where blocked
        self.nbytes = np.zeros(0, np.int64)
        self.size = np.zeros(0)  # max(nbytes, 1) as a float: the size term's divisor
        self.last_access = np.zeros(0)
        self.active = np.zeros(0, bool)  # a candidate, not a hole
        self.blocked = np.zeros(0, bool)  # a hole or a locked candidate: not scored
        self.term = np.zeros(0)  # the neighbourhood term under estar and ancestors
        self.edges = np.zeros((1, 0), np.int64)  # see the module docstring
        self.labels = np.zeros((1, 0), np.int64)  # (eq) edges' class labels, for ``term``
        self.keys = np.zeros((1, 0), np.int64)  # (eq) each edge's place among the row's
        self.pending: list[int] = []  # (eq) rows whose edges changed since their term
        self.edge_width = 0  # the most evicted neighbours written for a row
        self.bordering: dict[int, set[int]] | None = None  # (eq) label -> rows; None: rebuild
        self.ratio = np.zeros(0)  # the score before staleness, for ``ratio_key``
        self.ratio_key: tuple[str, bool] | None = None  # (cost term, size?); None: stale
        self.rewritten: list[int] = []  # rows whose score inputs were written since ``ratios``
        self.scratch = np.zeros(0)  # a decision's staleness and scores
        # while no table is kept (``Allocator.listing``): where a storage that became a
        # candidate again would be, as (next storage id then, a count); others go by id
        self.listed_at: weakref.WeakKeyDictionary[Storage, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        self.relisted = 0
        # set for good by the first eviction of a referenced storage (``Eviction.evict``):
        # until then no death can leave an orphan, so deaths skip that test (lifetime.py).
        # Kept here, since the table lives as long as its allocator, whose instance dict
        # is full (see ``Allocator.listing``)
        self.orphans_possible = False
        self._bind()

    def clear(self) -> None:
        """Empty, as new (the storages' ``row`` must be reset first), keeping ``listed_at``."""
        kept = self.listed_at, self.relisted, self.orphans_possible
        self.__init__()
        self.listed_at, self.relisted, self.orphans_possible = kept

    def note_listed(self, storage: Storage, next_id: int) -> None:
        """``storage`` became a candidate while no table is kept: where a kept table would
        have put it (after the storages made so far, ``next_id`` the last id given)."""
        self.relisted += 1
        self.listed_at[storage] = (next_id, self.relisted)

    # ---- the set interface -----------------------------------------------------------------

    def __len__(self) -> int:
        return self.count

    def __contains__(self, storage: Storage) -> bool:
        row = storage.row
        return 0 < row < len(self.storages) and self.storages[row] is storage

    def __iter__(self) -> Iterator[Storage]:
        """The candidates in insertion order (a snapshot: the table may change meanwhile)."""
        return iter([s for s in self.storages if s is not None])

    def __setitem__(self, storage: Storage, value: None) -> None:
        self.add(storage)

    def add(self, storage: Storage) -> None:
        """``table[storage] = None`` as a plain method call (cheaper: it runs for every op)."""
        row = storage.row
        if row:
            self.dirty[row] = 1  # already a candidate: keeps its place, as in a dict
            return
        storage.row = len(self.storages)
        self.storages.append(storage)
        self.dirty.append(1)
        self.count += 1

    def __delitem__(self, storage: Storage) -> None:
        self.pop(storage)

    def pop(self, storage: Storage, default=_MISSING):
        row = storage.row
        if not row:
            if default is _MISSING:
                raise KeyError(storage)
            return default
        self.storages[row] = None
        self.dirty[row] = 1
        storage.row = 0
        self.count -= 1
        if len(self.storages) > 2 * self.count + LAZY_SLACK:
            self.compact()
        return None

    # ---- the columns ------------------------------------------------------------------------

    @property
    def locked(self) -> int:
        """How many candidates were locked at the last ``sync``."""
        return len(self._locked)

    @property
    def rows(self) -> int:
        """Rows in use, holes and the scratch row included (the columns' live length)."""
        return len(self.storages)

    def sync(self) -> None:
        """Bring the columns up to date: grow them to the rows in use and re-read the rows
        marked dirty and those seen locked last time (one row at a time when they are a
        few, as arrays when many), after squeezing out the holes if they pass an eighth."""
        if len(self.storages) > self.count + (self.count >> COMPACT_SHIFT) + COMPACT_SLACK:
            self.compact()
        used = len(self.storages)
        if self._capacity < used:
            self._grow(max(used, 2 * self._capacity, 16))
        if len(self.frontier) < used:  # new rows may have evicted neighbours
            self.frontier.extend(b"\x01" * (used - len(self.frontier)))
        find = self.dirty.find
        rows = []
        row = find(1, 1)  # row 0 is scratch
        while row >= 0 and len(rows) < SYNC_ONE_BY_ONE:
            rows.append(row)
            row = find(1, row + 1)
        if row >= 0:
            self._sync_many()
            return
        if not rows and not self._locked:
            return
        dirty = self.dirty
        for row in rows:
            dirty[row] = 0
        if self._locked:
            rows = sorted({*rows, *self._locked})
        self.rewritten += rows
        storages, frontier = self.storages, self.frontier
        active, blocked, cost, unit = self.active_at, self.blocked_at, self.cost_at, self.unit_at
        nbytes_at, size, last_access = self.nbytes_at, self.size_at, self.last_access_at
        locked = []
        for row in rows:
            storage = storages[row]
            if storage is None:
                active[row] = False
                blocked[row] = True
                cost[row] = unit[row] = inf
                frontier[row] = 0
                for j in range(self.edge_width):  # positions past it are 0 in every row
                    self.edges_at[j][row] = self.labels_at[j][row] = 0
                continue
            active[row] = True
            nbytes = storage.nbytes
            nbytes_at[row] = nbytes
            size[row] = max(nbytes, 1)
            last_access[row] = storage.last_access
            if storage.locks:
                blocked[row] = True
                cost[row] = unit[row] = inf
                locked.append(row)
            else:
                blocked[row] = False
                cost[row] = storage.cost
                unit[row] = 1.0
        self._locked = locked

    def _sync_many(self) -> None:
        dirty = np.frombuffer(self.dirty, np.uint8)
        rows = np.flatnonzero(dirty)
        dirty[rows] = 0
        del dirty  # release the buffer: the bytearray may grow again
        if self._locked:
            rows = np.union1d(rows, self._locked)
        row_list = rows.tolist()
        self.rewritten += row_list
        storages = self.storages
        found = [storages[r] for r in row_list]
        live = [s for s in found if s is not None]
        self.active[rows] = False
        self.blocked[rows] = True
        self.cost[rows] = inf
        self.unit[rows] = inf
        if len(live) < len(found):  # holes: nothing to watch
            holes = rows[[s is None for s in found]]
            frontier = np.frombuffer(self.frontier, np.uint8)
            frontier[holes] = 0
            del frontier
            self.edges[:, holes] = 0
            self.labels[:, holes] = 0
        if not live:
            self._locked = []
            return
        live_rows = rows if len(live) == len(found) else rows[[s is not None for s in found]]
        self.active[live_rows] = True
        nbytes = np.array([s.nbytes for s in live], np.int64)
        self.nbytes[live_rows] = nbytes
        self.size[live_rows] = np.maximum(nbytes, 1)
        self.last_access[live_rows] = [s.last_access for s in live]
        locked = np.array([s.locks != 0 for s in live], bool)
        self.blocked[live_rows] = locked
        self._locked = live_rows[locked].tolist()
        open_rows = live_rows[~locked]
        self.cost[open_rows] = [s.cost for s in live if not s.locks]
        self.unit[open_rows] = 1.0

    def _bind(self) -> None:
        """Memoryviews of the columns, ``<column>_at``, one per neighbour position for
        ``edges`` and ``labels``: the paths that touch a few rows read and write scalars
        through them, at under half NumPy's cost per scalar (bound again whenever a
        column is replaced)."""
        for name in ("cost", "unit", "nbytes", "size", "last_access", "term", "ratio"):
            setattr(self, name + "_at", memoryview(getattr(self, name)))
        self.active_at = memoryview(self.active)
        self.blocked_at = memoryview(self.blocked)
        self.edges_at = [memoryview(position) for position in self.edges]
        self.labels_at = [memoryview(position) for position in self.labels]
        self.keys_at = [memoryview(position) for position in self.keys]

    def _grow(self, capacity: int) -> None:
        def grown(column: np.ndarray, fill) -> np.ndarray:
            out = np.full(capacity, fill, column.dtype)
            out[: len(column)] = column
            return out

        self.cost = grown(self.cost, inf)
        self.unit = grown(self.unit, inf)
        self.nbytes = grown(self.nbytes, 0)
        self.size = grown(self.size, 1.0)
        self.last_access = grown(self.last_access, 0.0)
        self.term = grown(self.term, 0.0)
        self.ratio = grown(self.ratio, inf)
        self.scratch = grown(self.scratch, 0.0)
        self.active = grown(self.active, False)
        self.blocked = grown(self.blocked, True)
        for name in ("edges", "labels", "keys"):
            old = getattr(self, name)
            new = np.zeros((len(old), capacity), np.int64)
            new[:, : old.shape[1]] = old
            setattr(self, name, new)
        self._capacity = capacity
        self._bind()

    def ratios(self, mode: str, size: bool, used: int) -> np.ndarray:
        """``ratio[:used]`` for cost term ``mode`` (``term`` must hold its neighbourhood
        part) and with the size term or not, recomputing the ``rewritten`` rows (every
        row when they are many or the formula changed)."""
        ratio = self.ratio
        rows, self.rewritten = self.rewritten, []
        if self.ratio_key != (mode, size) or len(rows) > RATIOS_ONE_BY_ONE:
            pick = slice(0, used)
            if mode == "none":
                top = self.unit[pick]
            elif mode == "local":
                top = self.cost[pick]
            else:
                top = np.add(self.cost[pick], self.term[pick], out=ratio[pick])
            if size:
                np.divide(top, self.size[pick], out=ratio[pick])
            elif top.base is not ratio:
                ratio[pick] = top
            self.ratio_key = (mode, size)
            return ratio[pick]
        cost, term, out, divisor = self.cost_at, self.term_at, self.ratio_at, self.size_at
        if mode == "none":
            cost = self.unit_at
        if mode in ("none", "local"):
            for row in rows:
                out[row] = cost[row] / divisor[row] if size else cost[row]
        else:
            for row in rows:
                top = cost[row] + term[row]
                out[row] = top / divisor[row] if size else top
        return ratio[:used]

    def bordering_index(self, width: int) -> dict[int, set[int]]:
        """``bordering`` as the ``labels`` columns give it (built afresh when None)."""
        if self.bordering is None:
            index: dict[int, set[int]] = {}
            positions, rows = np.nonzero(self.labels[:width, : len(self.storages)])
            names = self.labels[positions, rows].tolist()
            for label, row in zip(names, rows.tolist(), strict=True):
                found = index.get(label)
                if found is None:
                    index[label] = {row}
                else:
                    found.add(row)
            self.bordering = index
        return self.bordering

    def widen(self, width: int) -> None:
        """Room for ``width`` evicted neighbours per row in ``edges``."""
        for name in ("edges", "labels", "keys"):
            old = getattr(self, name)
            new = np.zeros((max(width, 2 * len(old)), old.shape[1]), np.int64)
            new[: len(old)] = old
            setattr(self, name, new)
        self._bind()

    def compact(self) -> None:
        """Squeeze out the holes, keeping the order and each row's flags (amortized O(1) per
        removal). The columns keep their capacity; rows past the candidates are scratch
        until appended (and then read afresh: they are dirty and flagged). So are the rows
        at or past the capacity, never synced (``sync`` grows the columns first): only the
        rows inside move, so that squeezing a table between decisions does not grow it."""
        used = len(self.storages)
        if len(self.frontier) < used:
            self.frontier.extend(b"\x01" * (used - len(self.frontier)))
        for row in self.pending:  # renumbered: re-read them instead
            self.frontier[row] = 1
        self.pending = []
        kept = [storage for storage in self.storages if storage is not None]
        keep = [0]
        keep += [storage.row for storage in kept]  # their rows before the squeeze
        for row, storage in enumerate(kept, 1):
            storage.row = row
        kept.insert(0, None)  # row 0: "not a candidate"
        self.storages = kept
        self.bordering = None  # rows renumbered
        index = np.array(keep, np.intp)
        n = len(keep)
        self.frontier = bytearray(np.frombuffer(self.frontier, np.uint8)[index].tobytes())
        self.dirty = bytearray(np.frombuffer(self.dirty, np.uint8)[index].tobytes())
        if self._locked:
            renumber = np.zeros(used, np.intp)
            renumber[index] = np.arange(n)
            locked = renumber[self._locked]
            self._locked = locked[locked > 0].tolist()  # 0: removed since
        inside = int(np.searchsorted(index, self._capacity))  # index is increasing
        moved = index[:inside]
        columns = ("cost", "unit", "nbytes", "size", "last_access", "term", "ratio", "active")
        columns += ("blocked",)
        for name in columns:
            column = getattr(self, name)
            column[:inside] = column[moved]
        for pairs in (self.edges, self.labels, self.keys):
            pairs[:, :inside] = pairs[:, moved]
            pairs[:, inside:used] = 0

    def watch(self, mode: str, epoch: int = 0) -> None:
        """Serve cost term ``mode`` from now on: every candidate's row is flagged (as of
        the last ``sync``; holes are not)."""
        used = len(self.storages)
        self.frontier = bytearray(self.active[:used].tobytes()).ljust(used, b"\x01")
        self.watching = mode
        self.watched_epoch = epoch
        self.bordering = None

    def mark_descendants(self, storage: Storage) -> None:
        """``storage`` was evicted or left the evicted set: flag the rows whose evicted
        ancestors it may be among (resident children of it and of its evicted
        descendants: the ``ancestors`` term).

        The walk stops at the storages in ``walked``: those a walk went from or through
        since the flags were last taken (``take_flags``), whose rows below are flagged
        already. A row below one of them that the walk did not see since has its own
        flag: it became resident (a new row), or the evicted storage above it was
        evicted since (its own walk). So freeing a long evicted chain walks each
        storage once until the next decision, not its whole remaining tail per death.
        Weak references: a storage freed meanwhile leaves the set, and its id may be
        reused by another."""
        walked = self.walked
        if storage in walked:
            return
        walked.add(storage)
        frontier = self.frontier
        known = len(frontier)
        stack = [storage]
        while stack:
            for child in stack.pop().live_children():
                if child.buffer is None:
                    if not child.banished and child not in walked:
                        walked.add(child)
                        stack.append(child)
                elif child.row < known:
                    frontier[child.row] = 1

    def take_flags(self) -> None:
        """A decision is about to clear frontier flags: walks must go all the way again."""
        if self.walked:
            self.walked.clear()

    def border_evicted(self, storage: Storage, index: int) -> None:
        """(eq) ``storage`` was just evicted, its union-find node mirrored as ``index``:
        add it to the edges of each neighbour's row (see ``_border``)."""
        self._border_around(storage, index)

    def border_left(self, storage: Storage) -> None:
        """(eq) ``storage`` left the evicted set: take it out of its neighbours' edges."""
        self._border_around(storage, 0)

    def _border_around(self, storage: Storage, index: int) -> None:
        frontier = self.frontier
        known = len(frontier)  # rows past it are flagged
        key = CHILD_KEY + storage.id  # its key in its parents' rows
        for parent in storage.parents:
            row = parent.row
            if 0 < row < known and not frontier[row]:
                self._border(row, key, index)
        for child in storage.live_children():
            row = child.row
            if 0 < row < known and not frontier[row]:
                parents = child.parents
                if storage in parents:
                    self._border(row, parents.index(storage), index)
                else:  # not a parent of its child any more: let a re-read decide
                    frontier[row] = 1

    def _border(self, row: int, key: int, index: int) -> None:
        """Insert the evicted neighbour with order ``key`` and mirror index ``index`` into
        row ``row``'s edges, or take it out (``index`` 0), keeping the edges in
        ``key`` order, and list the row in ``pending`` (its term is stale). A row
        flagged for a re-read is left to it, and so is one whose edges do not hold
        what this change expects (the re-read finds the truth)."""
        frontier = self.frontier
        if frontier[row]:
            return
        edges, keys, width = self.edges_at, self.keys_at, self.edge_width
        count = 0  # edges in use; the place of ``key`` among them
        place = -1
        while count < width and edges[count][row]:
            found = keys[count][row]
            if found >= key and place < 0:
                place = count
                if found == key and index:
                    frontier[row] = 1  # already there
                    return
            count += 1
        if place < 0:
            place = count
        if not index:  # take it out
            if place == count or keys[place][row] != key:
                frontier[row] = 1  # not there
                return
            for j in range(place, count - 1):
                edges[j][row] = edges[j + 1][row]
                keys[j][row] = keys[j + 1][row]
            edges[count - 1][row] = keys[count - 1][row] = 0
        else:
            if count == width:
                if width == len(self.edges):
                    self.widen(width + 1)
                    edges, keys = self.edges_at, self.keys_at
                self.edge_width = width + 1
            for j in range(count, place, -1):
                edges[j][row] = edges[j - 1][row]
                keys[j][row] = keys[j - 1][row]
            edges[place][row] = index
            keys[place][row] = key
        self.pending.append(row)

    def mark_neighbours(self, storage: Storage) -> None:
        """``storage`` was evicted or left the evicted set: flag its neighbours' rows."""
        frontier = self.frontier
        known = len(frontier)  # rows past it are flagged already
        for neighbour in storage.neighbours():
            if neighbour.row < known:
                frontier[neighbour.row] = 1  # row 0 (not a candidate) is scratch

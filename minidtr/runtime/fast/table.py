"""Accelerates ``candidates.Candidates`` and the per-candidate reads of ``victims.py``: the
eviction candidates as a table, score inputs in NumPy columns, one row per storage.

To the allocator ``CandidateTable`` is the candidate set (``add``, ``discard``, ``touch``,
``evicted``, iteration in insertion order). Behind that, each candidate has a *row*
(``Storage.row``; 0 means "not a candidate") in columns of its cost, size, last access and lock
state, so that an eviction decision is a few array operations (``search.py``) rather than a Python
call per candidate. Equivalent to the reference set because rows keep insertion order: a removed
row becomes a hole, and a storage added again is appended.

Rows are appended and never reordered: holes are squeezed out (keeping the order) when a decision
is about to read the columns and they pass an eighth of the candidates (and ``COMPACT_SLACK``), so
a decision scans at most about 9/8 of a row per candidate. Between decisions holes are squeezed out
only once they outnumber the candidates (and ``LAZY_SLACK``): a backward pass frees two values per
node and a chain one per op, and squeezing at an eighth cost those a Python loop over some 16 rows
per removal. Each squeeze (and emptying) gives the rows a new ``numbering``, unique among tables. A
*blocked* row (a hole, or a candidate seen locked) holds +inf in ``cost`` and ``unit`` (the "1" of
the cost term ``none``), so every score computed from them is +inf without a mask.

Without a budget nothing is searched, so no table is kept (``listing`` is False; it would cost 7-9%
of an op's instructions): a new candidate notes where a kept table would put it (``listed_at``),
and ``start_listing`` lists the live storages in that order.

Keeping the columns true costs the allocator almost nothing per op. It does not copy values;
it marks rows *dirty* (``touch``: a byte write) and ``sync`` re-reads the marked rows from
their storages when a decision is about to be made:

- ``last_access``, or ``locks`` going up: the row is touched before the next decision
  (``Rematerializer.lock`` and ``frame`` do); ``locks`` going down needs nothing (rows
  seen locked are re-read at every sync until seen unlocked);
- ``cost`` changes only while the storage is locked (a view op adds its cost to its
  locked base); a new row is read afresh.

``frontier`` flags rows whose neighbourhood term may have changed: new rows (rows past its length
count as flagged) and, while ``estar`` or ``ancestors`` is in use (``watching`` names the cost
term), the rows next to each storage that is evicted or leaves the evicted set and the rows below
(and, for ``estar``, above) it through evicted storages, whose closures changed with it. Under
``estar`` the closures' invalidation walk flags them all (``CachedClosures.flagged``); under
``ancestors`` ``evicted`` and ``mark_descendants`` do. A decision recomputes the term of each
flagged row into ``term`` and clears the flag, so the other rows' terms are read from the column.
Under ``eq`` the rows keep their evicted neighbours' classes in ``edges`` (``borders.py``).

``ratio`` holds each row's score before the staleness term, for the cost and size terms a decision
last asked for (``ratios``): ``(cost + term) / size`` (``cost`` for ``local``, ``unit`` for
``none``; no division without the size term), by ``Heuristic.score``'s floating-point operations.
``rewritten`` lists the rows whose ``cost``, ``unit``, ``size`` or ``term`` were written since (by
``sync`` and term updates; a decision takes them all), and ``ratios`` recomputes those only, or
every row for another formula.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from itertools import count
from math import inf
from typing import TYPE_CHECKING

import numpy as np

from ..storage import Storage
from .usefulness import Usefulness

if TYPE_CHECKING:
    from ..allocator import Allocator

COMPACT_SLACK = 64  # holes tolerated beyond an eighth of the candidates before squeezing
COMPACT_SHIFT = 3  # ... an eighth: count >> COMPACT_SHIFT
LAZY_SLACK = 1024  # holes tolerated beyond the candidates' count between decisions
FLAGS_ONE_BY_ONE = 64  # up to this many flagged rows, ``flagged_rows`` finds them one at a time
SYNC_ONE_BY_ONE = 32  # up to this many dirty rows, ``sync`` re-reads them one at a time
NUMBERINGS = count(1)


class CandidateTable:
    # slots: a table has more attributes than CPython 3.11 shares the keys of in an
    # instance dict (30), and without them every attribute read and method call on it
    # would take the slow path
    __slots__ = (
        "owner",
        "numbering",
        "listing",
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
        "wide",
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
        "usefulness",
    )

    def __init__(self, owner: Allocator | None = None):
        self.owner = owner  # the allocator whose candidates these are
        self.numbering = next(NUMBERINGS)  # new whenever rows are renumbered
        self.listing = False  # whether the table is kept (a search may happen)
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
        self.wide: dict[int, int] = {}  # (eq) the rows holding more than WIDE: their spans
        self.bordering: dict[int, set[int]] | None = None  # (eq) label -> rows; None: rebuild
        self.ratio = np.zeros(0)  # the score before staleness, for ``ratio_key``
        self.ratio_key: tuple[str, bool] | None = None  # (cost term, size?); None: stale
        self.rewritten: list[int] = []  # rows whose score inputs were written since ``ratios``
        self.scratch = np.zeros(0)  # a decision's staleness and scores
        # while no table is kept (``listing`` is False): where a storage that became a
        # candidate again would be, as (next storage id then, a count); others go by id
        self.listed_at: weakref.WeakKeyDictionary[Storage, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        self.relisted = 0
        # set for good once an evicted storage has a handle (``referenced_evicted``); until
        # then deaths skip the orphan test (hotpath.py). Made after storages were: unknown
        self.orphans_possible = owner is not None and owner.next_id > 0
        # ``useful_dead``'s kept yeses (usefulness.py): this table hears every change
        self.usefulness = Usefulness(None if owner is None else owner.lifetimes)
        self._bind()

    def clear(self) -> None:
        """Empty, as new (the storages' ``row`` must be reset first), keeping ``listed_at``."""
        kept = self.listed_at, self.relisted, self.orphans_possible, self.usefulness
        self.__init__(self.owner)
        self.listed_at, self.relisted, self.orphans_possible, self.usefulness = kept

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

    def add(self, storage: Storage) -> None:
        """``storage`` became a candidate; one that already is keeps its place."""
        if not self.listing:
            next_id = self.owner.next_id
            if storage.id != next_id:  # the newest storage's place is its id already
                self.note_listed(storage, next_id)
            return
        row = storage.row
        if row:
            self.dirty[row] = 1  # already a candidate: keeps its place, as in a dict
            return
        storage.row = len(self.storages)
        self.storages.append(storage)
        self.dirty.append(1)
        self.count += 1

    def discard(self, storage: Storage, evicted: bool = False) -> None:
        """``storage`` is no candidate any more (``evicted``: it was evicted)."""
        usefulness = self.usefulness
        if usefulness.regions:
            (usefulness.evicted if evicted else usefulness.changed)(storage)
        row = storage.row
        if not row:
            return
        self.storages[row] = None
        self.dirty[row] = 1
        storage.row = 0
        self.count -= 1
        if len(self.storages) > 2 * self.count + LAZY_SLACK:
            self.compact()

    def touch(self, storage: Storage) -> None:
        """``storage``'s last access or lock count changed: re-read its row."""
        self.dirty[storage.row] = 1  # row 0 (not a candidate) is scratch

    def evicted(self, storage: Storage, reason: str) -> None:
        """``storage`` was evicted: out of the table, its neighbours' rows flagged."""
        self.discard(storage, evicted=True)
        if storage.external_refs:
            self.referenced_evicted(storage)
        eviction = self.owner.eviction
        if self.watching == "eq" and eviction.tracking == "eq":
            mirror = eviction.eq_classes.listener
            border_evicted(self, storage, mirror.index_of(storage.component))
        elif self.watching not in (None, "estar"):  # estar: the closures' walk flags them
            self.mark_neighbours(storage)
            if self.watching == "ancestors":
                self.mark_descendants(storage)

    def referenced_evicted(self, storage: Storage) -> None:
        """``storage`` is evicted and has a handle: an orphan may be made from now on."""
        self.orphans_possible = True
        self.usefulness.referenced_evicted(storage)

    def left_evicted(self, storage: Storage) -> None:
        """``storage`` left the evicted set: the rows below it may have lost an ancestor."""
        if self.usefulness.regions:
            self.usefulness.changed(storage)
        if self.watching == "ancestors":
            self.mark_descendants(storage)

    def set_searched(self, searched: bool) -> None:
        """Keep the table (a search may happen) or not (``listing``)."""
        if searched and not self.listing:
            self.start_listing()
        elif not searched and self.listing:
            self.stop_listing()

    def in_order(self) -> list[Storage]:
        """Every candidate, in the order a table kept all along would hold them."""
        if self.listing:
            return list(self)
        return self.live_candidates()

    def live_candidates(self) -> list[Storage]:
        """The resident, evictable storages of the owner, found among the objects Python's
        cycle collector tracks (as entering a budgeted runtime already scans them with
        ``gc.collect``; or among those its collection of the young generations found:
        ``Lifetimes.take_survivors``), in ``listed_at`` order. A storage frozen by
        ``gc.freeze()`` is not found: it stays resident, unevictable."""
        owner = self.owner
        ledger = owner.ledger
        if ledger.memory == ledger.constant_bytes + ledger.pinned_bytes:
            return []  # nothing resident is evictable: no need to scan the heap
        survivors = owner.lifetimes.take_survivors()  # those a young collection just found
        found = [
            obj
            for obj in (gc.get_objects() if survivors is None else survivors)
            if type(obj) is Storage and obj.allocator is owner
            and obj.buffer is not None and obj.evictable
        ]  # fmt: skip
        listed_at = self.listed_at
        found.sort(key=lambda s: listed_at.get(s) or (s.id, 0))
        return found

    def start_listing(self) -> None:
        """Fill the table with the live candidates, in order (skipped when every resident
        byte is a constant's or pinned: a storage of 0 bytes made without a budget is then
        not listed, and evicting it would free nothing)."""
        self.listing = True
        ledger = self.owner.ledger
        if ledger.memory == ledger.constant_bytes + ledger.pinned_bytes:
            return
        for storage in self.live_candidates():
            self.add(storage)

    def stop_listing(self) -> None:
        """Empty the table, remembering its order for a later ``start_listing``: as if each
        storage had been added again now."""
        next_id = self.owner.next_id
        for storage in self:
            self.note_listed(storage, next_id)
            storage.row = 0
        self.clear()
        self.listing = False

    def relist(self, order: list[Storage]) -> None:
        """A new table for candidates kept elsewhere until now, in ``order``."""
        listing, self.listing = self.listing, False
        next_id = self.owner.next_id
        for storage in order:
            storage.row = 0
            self.note_listed(storage, next_id)  # where a kept table would put it
        if listing:
            self.start_listing()

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
                for j in range(self.wide.pop(row, 0) or narrow(self)):  # past it: all 0
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
        """Memoryviews of the columns, ``<column>_at``, one per neighbour position for ``edges``
        and ``labels``: the paths that touch a few rows read and write scalars through
        them, at under half NumPy's cost per scalar (bound again whenever a column is
        replaced)."""
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
        self.storages, self.numbering = kept, next(NUMBERINGS)
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
        renumbered(self, keep, inside)

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
        owner = self.owner
        while stack:
            for child in stack.pop().live_children():
                if child.allocator is not owner:
                    continue
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

    def mark_neighbours(self, storage: Storage) -> None:
        """``storage`` was evicted or left the evicted set: flag its neighbours' rows."""
        frontier = self.frontier
        known = len(frontier)  # rows past it are flagged already
        owner = self.owner
        for neighbour in storage.neighbours():
            if neighbour.row < known and neighbour.allocator is owner:
                frontier[neighbour.row] = 1  # row 0 (not a candidate) is scratch


def flagged_rows(table: CandidateTable, rows: np.ndarray | None, used: int) -> list[int]:
    """The rows flagged in ``table.frontier`` among the scored ones (``rows``, or every
    unblocked row: those flagged 1, not ``BOUNDED``, fast/search.py), in row order."""
    flags = table.frontier
    if rows is None:
        blocked = table.blocked
        found = []
        row = flags.find(1, 1)  # row 0 is scratch
        while 0 <= row < used and len(found) < FLAGS_ONE_BY_ONE:
            if not blocked[row]:
                found.append(row)
            row = flags.find(1, row + 1)
        if not 0 <= row < used:
            return found
    frontier = np.frombuffer(flags, np.uint8)
    if rows is None:
        stale = np.flatnonzero((frontier[:used] == 1) & ~table.blocked[:used]).tolist()
    else:
        stale = rows[frontier[rows].astype(bool)].tolist()
    del frontier  # release the buffer: the bytearray may grow again
    return stale


from .borders import border_evicted, narrow, renumbered  # noqa: E402

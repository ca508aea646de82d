"""Eviction: choosing the storage with the lowest heuristic score and freeing its buffer.

Part of ``Allocator`` (a mixin, so that each concern reads on its own): the
candidate set is every resident, evictable storage, kept up to date by the
allocator; a search scores the unlocked ones (or a sqrt(n) sample, optionally
skipping small ones) and returns the best and the runner-up for the event log
(and, only when events are recorded, the few lowest with their score terms).
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from typing import Any

import numpy as np

from .candidates import CHILD_KEY, SYNC_ONE_BY_ONE, CandidateTable
from .heuristics import NEIGHBOURHOOD_COST, Heuristic
from .neighbourhood import MODES, neighbourhood_term
from .runtime import BudgetError
from .storage import Storage

SHORTLIST = 5  # candidates recorded with each budget eviction (victim, runner-up, ...)
MIRROR_SLACK = 1024  # the union-find mirror is rebuilt past 8 * (table rows + this) entries
BORDER_SCAN_SHARE = 32  # rows of touched classes beyond 1/this of the table: scan the labels


# Off only while a search probes budgets it expects to fail (``minidtr.testing``'s
# bisections): each failure would otherwise rescan the whole Python heap.
COLLECT_BEFORE_FAILING = True


class Eviction:
    def _evict_until(self, target: int, op_name: str, needed: int) -> None:
        """Evict until at most ``target`` bytes are resident (the caller is busy).

        Before giving up, Python's cycle collector runs once: values in unreachable
        reference cycles (a recursive closure's) are only freed by it, and whether a
        run fits must not depend on when it happens to run. Their handles' deaths wait
        in the queue (the allocator is busy), but their storages stay candidates, and
        constants die at once."""
        collected = False
        while self.memory > target:
            victim, score, runner_up, shortlist = self._choose_victim()
            if (
                victim is None
                and not collected
                and COLLECT_BEFORE_FAILING
                and not self._tentative
                and self._locked_bytes() <= target
            ):
                collected = True
                gc.collect()
                continue
            if victim is None:
                raise BudgetError(
                    op_name,
                    needed,
                    self.budget,
                    self.memory,
                    self.pinned_bytes,
                    self.constant_bytes,
                    self._locked_bytes(),
                )
            self.evict(victim, score=score, runner_up=runner_up, candidates=shortlist)
            del victim  # its metadata, and constants only it kept alive, may go now

    def _locked_bytes(self) -> int:
        return sum(s.nbytes for s in self.candidates if s.locks)

    def _choose_victim(self) -> tuple[Storage | None, float, Any, list | None]:
        """The unlocked candidate with the lowest score (the first in insertion order among
        equals), its score, the runner-up and, when events are recorded, the lowest-scoring
        few with their score terms.

        A ``Heuristic`` with a built-in cost term is evaluated on the candidate table's
        columns at once (``_choose_by_table``); any other heuristic object, a cost term
        of your own, and any search whose scores hold a NaN go through the reference
        loop (``_choose_by_loop``), which calls ``heuristic.score`` per candidate. Both
        give the same answer."""
        started = time.perf_counter()
        table = self.candidates
        heuristic = self.runtime.heuristic
        if type(heuristic) is Heuristic and heuristic.vectorized:
            result = self._choose_by_table(table)
        else:
            result = self._choose_by_loop(self._pool(list(self.candidates)))
        self.stats.search_time += time.perf_counter() - started
        return result

    def _pool(self, candidates: list[Storage]) -> list[Storage]:
        """The candidates a search considers, in insertion order: those of at least
        ``min_size`` times the mean size, then (with ``sample``) every k-th of them from a
        random start, k = isqrt(n)."""
        runtime = self.runtime
        if runtime.min_size > 0.0 and candidates:
            mean = sum(s.nbytes for s in candidates) / len(candidates)
            threshold = runtime.min_size * mean
            candidates = [s for s in candidates if s.nbytes >= threshold]
        if runtime.sample and len(candidates) > 4:
            stride = max(1, math.isqrt(len(candidates)))
            candidates = candidates[self._sampler.randrange(stride) :: stride]
        return candidates

    def _choose_by_loop(self, candidates: list[Storage]) -> tuple:
        """The reference search: score each unlocked candidate of the pool in turn."""
        runtime = self.runtime
        mode = getattr(runtime.heuristic, "cost", None)
        self.track(mode if mode in MODES else None)
        score = runtime.heuristic.score
        best = runner_up = None
        best_score = runner_score = math.inf
        scored = 0
        seen: list | None = [] if runtime.events is not None else None
        self._scoring = True
        try:
            for storage in candidates:
                if storage.locks:
                    continue
                value = score(storage, self)
                scored += 1
                if seen is not None:
                    seen.append((value, storage))
                if value < best_score or best is None:
                    runner_up, runner_score = best, best_score
                    best, best_score = storage, value
                elif value < runner_score or runner_up is None:
                    runner_up, runner_score = storage, value
        finally:
            self._scoring = False
        stats = self.stats
        stats.searches += 1
        stats.scored += scored
        runner = None if runner_up is None else (runner_up.id, runner_score)
        shortlist = None if seen is None else self._shortlist(seen)
        return best, best_score, runner, shortlist

    def _shortlist(self, seen: list) -> list[dict[str, Any]]:
        """The ``SHORTLIST`` lowest-scoring candidates of a search, lowest first, with the
        terms of their scores (recorded with a budget eviction)."""
        terms = getattr(self.runtime.heuristic, "terms", None)
        out = []
        for value, storage in heapq.nsmallest(SHORTLIST, seen, key=lambda pair: pair[0]):
            entry = {"id": storage.id, "op": storage.name, "score": value}
            if terms is not None:
                entry.update(terms(storage, self))
            out.append(entry)
        return out

    def _choose_by_table(self, table: CandidateTable) -> tuple:
        """The same search on the table's columns: the pool as rows (in insertion order;
        every row, with holes and locked rows scored +inf, unless ``min_size`` or
        ``sample`` pick some), the neighbourhood terms (``_neighbourhood_terms``), the
        scores as one array expression (``Heuristic.scores``), and the first lowest and
        the runner-up (``lowest``)."""
        runtime = self.runtime
        heuristic: Heuristic = runtime.heuristic
        wanted = SHORTLIST if runtime.events is not None else 2
        table.sync()
        used = table.rows
        rows = None  # None: every row, holes and locked rows scored +inf
        scored = len(table) - table.locked
        if runtime.min_size > 0.0 or (runtime.sample and len(table) > 4) or scored < wanted:
            rows = self._pool_rows(table, used)
            scored = rows.size
        mode = heuristic.cost
        self.track(mode if mode in MODES else None)
        # over every row, holes and locked rows score +inf: their cost and unit are +inf
        pick = slice(0, used) if rows is None else rows
        neighbourhood = None
        if mode in NEIGHBOURHOOD_COST:
            neighbourhood = self._neighbourhood_terms(table, mode, rows, used)
        if rows is None and (
            type(neighbourhood) is not np.ndarray or neighbourhood.base is table.term
        ):
            # the table's ratio column, the score but for staleness, as the term column has it
            staleness = None
            if heuristic.staleness:
                staleness = np.subtract(
                    self.clock, table.last_access[pick], out=table.scratch[pick]
                )
            values = heuristic.ratio_scores(table.ratios(mode, heuristic.size, used), staleness)
        else:
            table.ratio_key = None  # terms per storage, or a pool: the ratios are not kept
            table.rewritten = []
            staleness = None
            if heuristic.staleness:
                staleness = self.clock - table.last_access[pick]
            values = heuristic.scores(
                table.cost[pick], neighbourhood, table.size[pick], staleness, table.unit[pick]
            )
        order = lowest(values, wanted)
        scores = list(map(values.item, order)) if order else []  # lowest first
        if order is None or (
            rows is None and scores and (math.isinf(scores[0]) or math.isinf(scores[-1]))
        ):
            # a NaN, or over the whole table an infinite score, which a blocked row could
            # tie with: the reference loop decides, on the same pool
            pool = range(used) if rows is None else rows.tolist()
            storages = table.storages
            return self._choose_by_loop([s for r in pool if (s := storages[r]) is not None])
        stats = self.stats
        stats.searches += 1
        stats.scored += scored
        if not order:
            return None, math.inf, None, None
        if rows is not None:
            order = rows[order].tolist()
        storages = list(map(table.storages.__getitem__, order))
        runner = (storages[1].id, scores[1]) if len(storages) > 1 else None
        shortlist = None
        if runtime.events is not None:
            shortlist = self._shortlist(list(zip(scores, storages, strict=True)))
        return storages[0], scores[0], runner, shortlist

    def _pool_rows(self, table: CandidateTable, used: int) -> np.ndarray:
        """``_pool`` on rows: the unlocked rows of the pool, in insertion order."""
        runtime = self.runtime
        rows = np.flatnonzero(table.active[:used])
        if runtime.min_size > 0.0 and rows.size:
            nbytes = table.nbytes[rows]
            threshold = runtime.min_size * (int(nbytes.sum()) / rows.size)
            rows = rows[nbytes >= threshold]
        if runtime.sample and rows.size > 4:
            stride = max(1, math.isqrt(rows.size))
            rows = rows[self._sampler.randrange(stride) :: stride]
        return rows[~table.blocked[rows]]

    def _neighbourhood_terms(
        self, table: CandidateTable, mode: str, rows: np.ndarray | None, used: int
    ) -> np.ndarray | float:
        """The neighbourhood part of the cost term for the scored rows (``rows``, or every
        row): what ``heuristic.score`` adds, 0.0 where no neighbour is evicted.

        ``eq`` is computed from the table's ``edges`` and the union-find's mirror
        (``_eq_terms``); ``estar`` and ``ancestors`` per storage for the flagged rows
        only, into the table's ``term`` column, which keeps every other row's term (a
        row is flagged whenever a closure or walk its term read may have changed:
        candidates.py). Whatever the table cannot do exactly (a class to rebuild after a
        mode switch) is done per storage for every row, in insertion order, as the
        reference loop does, so that the union-find classes and cached closures built
        along the way are the same."""
        eq = self.eq_classes
        epoch = eq.epoch if mode == "eq" else self.neighbourhood.epoch if mode == "estar" else 0
        if table.watching != mode or table.watched_epoch != epoch:
            table.watch(mode, epoch)
            eq.on_neighbours_changed = table.border_left if mode == "eq" else None
            self.neighbourhood.on_dropped = table.mark_neighbours if mode == "estar" else None
        if mode == "eq":
            self._scoring = True
            try:
                terms = self._eq_terms(table, rows, used)
            finally:
                self._scoring = False
            if terms is not None:
                return terms
            return self._terms_by_storage(table, mode, rows, used)
        stale = flagged_rows(table, rows, used)
        if stale:
            table.take_flags()
            storages, term, frontier = table.storages, table.term, table.frontier
            self._scoring = True
            try:
                for row in stale:
                    value = neighbourhood_term(mode, self, storages[row])
                    term[row] = 0.0 if value is None else value
                    frontier[row] = 0
            finally:
                self._scoring = False
            table.rewritten += stale
        return table.term[:used] if rows is None else table.term[rows]

    def _terms_by_storage(
        self, table: CandidateTable, mode: str, rows: np.ndarray | None, used: int
    ) -> np.ndarray:
        """Terms per storage (``neighbourhood_term``) for every scored row, in row order."""
        if rows is None:
            positions = np.flatnonzero(~table.blocked[:used])
            terms = np.zeros(used)
            chosen = positions.tolist()
        else:
            positions = np.arange(rows.size)
            terms = np.zeros(rows.size)
            chosen = rows.tolist()
        storages = table.storages
        values = []
        self._scoring = True
        try:
            for row in chosen:
                value = neighbourhood_term(mode, self, storages[row])
                values.append(0.0 if value is None else value)
        finally:
            self._scoring = False
        terms[positions] = values
        return terms

    def _eq_terms(
        self, table: CandidateTable, rows: np.ndarray | None, used: int
    ) -> np.ndarray | float | None:
        """h_DTR^eq's ``c(eq(t))`` for the scored rows from the table's ``term`` column:
        re-read the flagged rows' evicted neighbours into ``edges``, take the rows whose
        edges the changes updated (``pending``), find the rows whose classes changed
        since the last decision (the mirror's ``touched`` labels among the table's
        ``labels``) and recompute the terms of all three (``_eq_few`` when the first two
        are a few, ``_eq_recompute``). None
        when a neighbour's class must be rebuilt first (the per-storage path does that,
        in the reference's order; the rows re-read meanwhile are flagged again).

        Only re-read rows can name a class of an old epoch: a new epoch flags every row
        (``CandidateTable.watch``), and a class of the current epoch stays current."""
        eq = self.eq_classes
        mirror = eq.mirror
        if mirror.size > 8 * (used + MIRROR_SLACK):  # indices of long-gone classes pile up
            mirror.reset()
            table.edges[:] = 0
            table.labels[:] = 0
            table.keys[:] = 0
            table.edge_width = 0
            table.watch("eq", eq.epoch)
        read = self._eq_read(table, flagged_rows(table, rows, used))
        if read is None:
            return None
        if table.pending:
            self._eq_pending(table, read)
        stale = read
        width = table.edge_width
        if not width:  # no row names a class
            mirror.touched = set()
            mirror.merged = []
            table.bordering = {}
            table.term[stale] = 0.0
            table.rewritten += stale
            return 0.0  # cost + 0.0, as the reference adds
        if len(stale) <= SYNC_ONE_BY_ONE:
            self._eq_few(table, read, width, used)
        else:
            changed = stale
            if mirror.touched:
                changed = self._eq_changed_rows(table, stale, width, used)
            self._eq_recompute(table, changed, width, stale)
            table.rewritten += changed
        return table.term[:used] if rows is None else table.term[rows]

    def _eq_read(self, table: CandidateTable, stale: list[int]) -> list | None:
        """Re-read the evicted neighbours of the ``stale`` rows into ``edges`` (their
        mirror indices, parents first, and order keys into ``keys``) and clear their
        flags: the rows, or None when a neighbour's class must be rebuilt first (the
        rows read meanwhile are flagged again)."""
        if not stale:
            return []
        eq = self.eq_classes
        mirror = eq.mirror
        storages, frontier = table.storages, table.frontier
        epoch, generation, index_of = eq.epoch, mirror.generation, mirror.index_of
        read = []
        for row in stale:
            storage = storages[row]
            parents = storage.parents
            nodes = []
            keys = []  # order keys: a parent's place among the parents, a child's id + CHILD_KEY
            for place, neighbour in enumerate((*parents, *storage.live_children())):
                if neighbour.buffer is not None or neighbour.banished:
                    continue
                node = neighbour.component
                if node is None or node.epoch != epoch:  # (a class's nodes share its epoch)
                    for again in read:
                        frontier[again] = 1
                    return None
                nodes.append(node.index if node.generation == generation else index_of(node))
                keys.append(place if place < len(parents) else CHILD_KEY + neighbour.id)
            count = len(nodes)
            if count > table.edge_width:
                if count > len(table.edges):
                    table.widen(count)
                table.edge_width = count
            edges, keys_at = table.edges_at, table.keys_at  # 0 from edge_width on
            for j, node in enumerate(nodes):
                edges[j][row] = node
                keys_at[j][row] = keys[j]
            for j in range(count, table.edge_width):
                edges[j][row] = keys_at[j][row] = 0
            frontier[row] = 0
            read.append(row)
        return read

    def _eq_pending(self, table: CandidateTable, read: list[int]) -> None:
        """Add to ``read`` the rows whose edges changes kept up to date since the last
        decision (``CandidateTable.pending``), unless re-read or flagged for a re-read
        meanwhile, or gone."""
        pending, table.pending = table.pending, []
        storages, frontier = table.storages, table.frontier
        done = set(read)
        for row in pending:
            if row not in done and not frontier[row] and storages[row] is not None:
                done.add(row)
                read.append(row)

    def _eq_few(self, table: CandidateTable, read: list, width: int, used: int) -> None:
        """``c(eq)`` after a few rows were re-read (``_eq_read``): theirs, from the
        indices just read, each moved in ``table.bordering`` to its new labels (after
        the merges since the last decision were applied to it), then that of the other
        rows naming a label the mirror touched (``_eq_recompute``), found in the index
        or, when they are more than 1/``BORDER_SCAN_SHARE`` of the rows, by a scan of
        the ``labels`` columns."""
        mirror = self.eq_classes.mirror
        touched = mirror.touched
        index = table.bordering
        if touched:
            mirror.touched = set()
            if index is None or mirror.merged:
                index = self._eq_merged_index(table, width)
        label, cost = mirror.label_at, mirror.cost_at
        edges, labels, term = table.edges_at, table.labels_at, table.term_at
        for row in read:
            seen = []
            left = []  # the labels this row's changed positions named, and now name
            entered = []
            total = 0.0
            for j in range(width):
                found = label[edges[j][row]]  # padding: 0, of cost 0.0
                if found not in seen:
                    seen.append(found)
                    total += cost[found]
                at = labels[j]
                was = at[row]
                if was != found:
                    at[row] = found
                    left.append(label[was])  # a retired label as the one that took it
                    entered.append(found)
            term[row] = total
            if index is not None and left:
                _move_in_border_index(index, row, left, seen, entered)
        table.rewritten += read
        if not touched:
            return
        found = []
        listed = 0
        for name in touched:
            rows = index.get(name)
            if rows:
                found.append(rows)
                listed += len(rows)
        if not found:
            return
        if listed * BORDER_SCAN_SHARE <= used:
            others = set().union(*found)
            others.difference_update(read)
            others = list(others)
        else:
            columns = table.labels[:width, :used]
            hit = np.zeros(used, bool)
            for name in touched:
                for j in range(width):
                    hit |= columns[j] == name
            hit[read] = False
            others = np.flatnonzero(hit).tolist()
        if others:
            self._eq_recompute(table, others, width, [])
            table.rewritten += others

    def _eq_merged_index(self, table: CandidateTable, width: int) -> dict[int, set[int]]:
        """``table.bordering`` (built from the ``labels`` columns if need be) with each
        label a merge retired since the last decision moved onto the label that took
        its members (the smaller set into the larger)."""
        mirror = self.eq_classes.mirror
        index = table.bordering_index(width)
        for retired, kept in mirror.merged:
            moved = index.pop(retired, None)
            if moved:
                into = index.get(kept)
                if into is None:
                    index[kept] = moved
                elif len(into) >= len(moved):
                    into |= moved
                else:
                    moved |= into
                    index[kept] = moved
        mirror.merged = []
        return index

    def _eq_changed_rows(
        self, table: CandidateTable, stale: list[int], width: int, used: int
    ) -> list[int]:
        """The rows whose ``c(eq)`` to recompute, in row order: the re-read ones and those
        naming a label the mirror touched since the last decision. Those are found in
        ``table.bordering`` (first moving each label a merge retired onto the label that
        took its members, the smaller set into the larger) or, when they are more than
        1/``BORDER_SCAN_SHARE`` of the rows, by one scan of the ``labels`` columns per
        touched label and neighbour position."""
        mirror = self.eq_classes.mirror
        index = self._eq_merged_index(table, width)
        touched, mirror.touched = mirror.touched, set()
        found = [rows for label in touched if (rows := index.get(label))]
        if sum(map(len, found)) * BORDER_SCAN_SHARE <= used:
            changed = set(stale)
            changed.update(*found)
            return sorted(changed)
        labels = table.labels[:width, :used]
        hit = np.zeros(used, bool)
        hit[stale] = True
        for label in touched:
            for j in range(width):
                hit |= labels[j] == label
        return np.flatnonzero(hit).tolist()

    def _eq_recompute(
        self, table: CandidateTable, rows: list[int], width: int, reread: list[int]
    ) -> None:
        """``c(eq)`` of ``rows`` into ``term`` (their labels into ``labels``): each row's
        distinct classes' costs summed in neighbour order, adding 0.0 for a repeat or
        padding, so the same floats as ``EquivalenceClasses.cost`` (row by row when they
        are a few, as arrays when many). The ``reread`` rows' entries in
        ``table.bordering`` follow their new labels (the other rows' labels change only
        by merges, which ``_eq_changed_rows`` applied to it); when they are many, the
        index is dropped, to be rebuilt from the columns when next needed."""
        mirror = self.eq_classes.mirror
        index = table.bordering
        if index is not None and len(reread) > SYNC_ONE_BY_ONE:
            index = table.bordering = None
        before = {}  # each re-read row's labels, a retired one as the label that took it
        after = {}  # ... and its new labels
        if len(rows) <= SYNC_ONE_BY_ONE:
            label, cost = mirror.label_at, mirror.cost_at
            edges, labels, term = table.edges_at, table.labels_at, table.term_at
            moved = set(reread) if index is not None else ()
            for row in rows:
                if row in moved:
                    before[row] = [label[labels[j][row]] for j in range(width)]
                seen = []
                total = 0.0
                for j in range(width):
                    found = label[edges[j][row]]
                    labels[j][row] = found
                    if found not in seen:
                        seen.append(found)
                        total += cost[found]
                term[row] = total
                if row in moved:
                    after[row] = seen
        else:
            if index is not None:
                label = mirror.label
                before = {row: label[table.labels[:width, row]].tolist() for row in reread}
            index_rows = np.array(rows, np.intp)
            labels = mirror.label.take(table.edges[:width, index_rows])
            table.labels[:width, index_rows] = labels
            costs = mirror.cost.take(labels)
            terms = costs[0]  # 0.0 + c is c
            for j in range(1, width):
                repeat = labels[j] == labels[0]
                for i in range(1, j):
                    repeat |= labels[j] == labels[i]
                np.copyto(costs[j], 0.0, where=repeat)
                terms += costs[j]
            table.term[index_rows] = terms
        for row, old in before.items():
            new = after.get(row)
            if new is None:
                new = table.labels[:width, row].tolist()
            _move_in_border_index(index, row, old, new, new)

    def evict(
        self,
        storage: Storage,
        score: float | None = None,
        runner_up=None,
        reason: str = "budget",
        candidates: list | None = None,
    ) -> None:
        """Free a resident storage's buffer, keeping its recipe to recompute it later."""
        if storage.buffer is None:
            raise ValueError(f"cannot evict {storage!r}: it is not resident")
        if storage.op is None or storage.pinned or storage.locks:
            raise ValueError(
                f"cannot evict {storage!r}: it is "
                + ("locked" if storage.locks else "pinned" if storage.pinned else "a constant")
            )
        if self.tracking == "eq":
            self.eq_classes.on_evict(storage)
        storage.buffer = None
        if self.tracking == "estar":
            self.neighbourhood.on_change(storage)
        self.memory -= storage.nbytes
        table = self.candidates
        if self.listing:
            table.pop(storage)
        if reason != "dead":
            table.orphans_possible = True
        if table.watching == "eq" and self.tracking == "eq":
            table.border_evicted(storage, self.eq_classes.mirror.index_of(storage.component))
        elif table.watching:
            table.mark_neighbours(storage)
            if table.watching == "ancestors":
                table.mark_descendants(storage)
        runtime = self.runtimes[-1]
        stats = runtime.stats_
        stats.evictions += 1
        if reason == "dead":
            stats.dead_evictions += 1
        if runtime.events is not None:
            extra = {"reason": reason}
            if score is not None:
                extra["score"] = score
                extra["runner_up"] = runner_up
            if candidates:
                extra["candidates"] = candidates
            self._record("evict", storage, **extra)

    def free_device_memory(self, nbytes: int) -> bool:
        """Called on a real device out-of-memory error: evict one storage if possible."""
        if not self.listing:
            self._start_listing()  # until the next change of runtime or budget
        victim, score, runner_up, shortlist = self._choose_victim()
        if victim is None:
            return False
        self.evict(
            victim, score=score, runner_up=runner_up, reason="device-oom", candidates=shortlist
        )
        return True


FLAGS_ONE_BY_ONE = 64  # up to this many flagged rows, ``flagged_rows`` finds them one at a time


def flagged_rows(table: CandidateTable, rows: np.ndarray | None, used: int) -> list[int]:
    """The rows flagged in ``table.frontier`` among the scored ones (``rows``, or every
    unblocked row), in row order."""
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
        stale = np.flatnonzero(frontier[:used] > table.blocked[:used]).tolist()
    else:
        stale = rows[frontier[rows].astype(bool)].tolist()
    del frontier  # release the buffer: the bytearray may grow again
    return stale


def lowest(values: np.ndarray, k: int) -> list[int] | None:
    """Positions of the ``k`` lowest values, lowest first, equal values in position order
    (what a stable sort gives); None when a value is NaN."""
    if not values.size:
        return []
    first = int(values.argmin())  # the first NaN, if there is one
    if math.isnan(values.item(first)):
        return None
    if k == 1 or values.size == 1:
        return [first]
    if k == 2:
        # every value before ``first`` is larger than it: the runner-up is the first
        # lowest of the rest, the earlier one on a tie
        second = first + 1 + int(values[first + 1 :].argmin()) if first + 1 < values.size else -1
        if first:
            earlier = int(values[:first].argmin())
            if second < 0 or values.item(earlier) <= values.item(second):
                second = earlier
        return [first, second]
    if values.size > k:
        kth = np.partition(values, k - 1)[k - 1]
        positions = np.flatnonzero(values <= kth)
    else:
        positions = np.arange(values.size)
    return positions[np.argsort(values[positions], kind="stable")][:k].tolist()


def _move_in_border_index(index: dict, row: int, left, kept, entered) -> None:
    """Move ``row`` in h_DTR^eq's label -> bordering-rows index: out of each label in
    ``left`` it no longer borders (not in ``kept``), into each label in ``entered``.
    Label 0 is "no class" and is never indexed."""
    for gone in left:
        if gone and gone not in kept and (listed := index.get(gone)) is not None:
            listed.discard(row)
            if not listed:
                del index[gone]
    for found in entered:
        if found:
            listed = index.get(found)
            if listed is None:
                index[found] = {row}
            else:
                listed.add(row)

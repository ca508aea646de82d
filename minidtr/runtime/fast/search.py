"""Accelerates ``victims.choose_victim`` with ``Heuristic.score``: the same search on the
candidate table's columns, as a few array operations instead of a call per candidate.

The pool is the table's rows in insertion order (every row, holes and locked rows
scored +inf, unless ``min_size`` or ``sample`` pick some, by the same draws as
``victims.pool``), the neighbourhood terms come from the ``term`` column (recomputed
for the flagged rows only) or, for h_DTR^eq, from the mirrored classes
(``eqterms.py``), and the scores are one array expression by the same
floating-point operations in the same order as ``Heuristic.score``, so the same
floats. The first lowest score in row order is the candidate the loop would pick.
The runner-up and the shortlist, which only the ``evict`` event reads, are found
only when events are recorded (then the same as the loop's); without events the
``Choice`` has no runner-up, where the loop names one, and the search settles the
terms of fewer bounded rows. Whatever the table cannot do exactly (a NaN, an
infinite score a blocked row could tie with, a heuristic without a built-in cost
term) goes to the loop itself.

``MINIDTR_CHECK_DECISIONS=1 python -m pytest`` repeats every table decision with the
loop and asserts they agree (tests/decision_check.py); tests/test_reference.py
compares whole runs of the two.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import estar
from ..heuristics import COST_TERMS, MIN_STALENESS, NEIGHBOURHOOD_COST, Heuristic
from ..storage import Storage
from ..victims import SHORTLIST, Choice, choose_victim, pool_settings, shortlist_of
from . import learned_search
from .closures import EXACT_BELOW, evicted_children, evicted_parents
from .eqterms import eq_terms
from .table import flagged_rows

if TYPE_CHECKING:
    from ..eviction import Eviction
    from .table import CandidateTable

MODES = ("estar", "eq")

# The cost terms the arrays compute; a cost term added to (or replaced in) the dicts of
# heuristics.py is scored by ``Heuristic.score``, one storage at a time.
BUILT_IN_COST_TERMS = dict(COST_TERMS)
BUILT_IN_NEIGHBOURHOOD_COST = dict(NEIGHBOURHOOD_COST)

EAGER_TERMS = 2  # up to this many flagged rows, their terms are computed at once
BOUNDED = 2  # a flag: the row's term is a lower bound, 0.0 or ``tighten``'s
FILTER_BOUNDED = 64  # up to this many listed, the bounded rows are re-read at each decision
RATIOS_ONE_BY_ONE = 32  # up to this many rewritten rows, ``ratios`` updates them one at a time

_FLOOR = np.full(1024, MIN_STALENESS)


class TableSearch:
    """The search over ``table`` for ``eviction``."""

    def __init__(self, eviction: Eviction, table: CandidateTable):
        self.eviction = eviction
        self.table = table
        self.deferred: list[int] = []  # rows the last ``scores`` gave a lower bound
        self.bounded: list[int] = []  # rows flagged ``BOUNDED``, and some no longer so
        self.bounded_in: bytearray | None = None  # the ``table.frontier`` they are rows of
        self.filter_at = FILTER_BOUNDED  # ``bounded`` is re-read when it grows past this

    @staticmethod
    def handles(heuristic: Any) -> bool:
        """Whether the arrays give ``heuristic``'s scores: a ``Heuristic`` whose cost term
        is built in, or ``learned`` with h_DTR's (``learned_search.py``)."""
        if type(heuristic) is not Heuristic:
            return learned_search.handles(heuristic, BUILT_IN_COST_TERMS)
        cost = heuristic.cost
        return (
            COST_TERMS.get(cost) is BUILT_IN_COST_TERMS.get(cost)
            and NEIGHBOURHOOD_COST.get(cost) is BUILT_IN_NEIGHBOURHOOD_COST.get(cost)
            and cost in BUILT_IN_COST_TERMS
        )

    def idle(self) -> None:
        """No budget: nothing is scored, so stop flagging the rows a change touches (the
        next decision re-flags every row). Flagging for msps walks every evicted
        descendant, so a long evicted chain freed after an msps run would walk its whole
        remaining tail once per death."""
        self.table.watching = None

    def choose(self, runtime: Any, whole: bool = False) -> Choice:
        """The unlocked candidate with the lowest score, as ``victims.choose_victim``
        (of every candidate with ``whole``: ``victims.pool_settings``)."""
        eviction, table = self.eviction, self.table
        heuristic: Heuristic = runtime.heuristic
        if type(heuristic) is not Heuristic:
            return learned_search.choose_learned(self, runtime, whole)
        # the runner-up is read only by the ``evict`` event: without events, the lowest alone
        wanted = SHORTLIST if runtime.events is not None else 1
        table.sync()
        used = table.rows
        rows = None  # None: every row, holes and locked rows scored +inf
        scored = len(table) - table.locked
        min_size, sample = pool_settings(runtime, whole)
        if min_size > 0.0 or (sample and len(table) > 4) or scored < wanted:
            rows = self.pool_rows(min_size, sample, used)
            scored = rows.size
        mode = heuristic.cost
        eviction.track(mode if mode in MODES else None)
        values = self.scores(heuristic, rows, used)
        if self.deferred:
            if wanted == 1:
                order = self.settle_lowest(heuristic, values)
            else:
                order = self.settle_deferred(heuristic, values, wanted)
        else:
            order = lowest(values, wanted)
        scores = list(map(values.item, order)) if order else []  # lowest first
        if order is None or (
            rows is None and scores and (math.isinf(scores[0]) or math.isinf(scores[-1]))
        ):
            # a NaN, or over the whole table an infinite score, which a blocked row could
            # tie with: the reference loop decides, on the same pool
            pool = range(used) if rows is None else rows.tolist()
            storages = table.storages
            return self.loop([s for r in pool if (s := storages[r]) is not None], runtime)
        if not order:  # nothing to score: the loop's shortlist is empty when it records
            return Choice(None, math.inf, None, [] if runtime.events is not None else None, scored)
        if rows is not None:
            order = rows[order].tolist()
        storages = list(map(table.storages.__getitem__, order))
        runner = (storages[1].id, scores[1]) if len(storages) > 1 else None
        shortlist = None
        if runtime.events is not None:
            seen = list(zip(scores, storages, strict=True))
            shortlist = shortlist_of(seen, heuristic, eviction.context)
        return Choice(storages[0], scores[0], runner, shortlist, scored)

    def settle_deferred(
        self, heuristic: Heuristic, values: np.ndarray, wanted: int
    ) -> list[int] | None:
        """``lowest(values, wanted)`` for a shortlist (``settle_lowest`` for the lowest
        alone), once every row that may be among them has its exact score in ``values``,
        which holds lower bounds for the ``deferred`` rows (``neighbourhood_terms``). The
        ``wanted`` lowest of the rows scored exactly are kept as (score, row), in the
        order ``lowest`` gives; the deferred rows are taken in the order of their
        bounds, each getting a tighter bound (``tighten``) and, unless that passes the
        ``wanted``-th lowest, its term and exact score, until the next bound passes
        it: the rest cannot be among them and stay bounded."""
        frontier = self.table.frontier
        rows = [row for row in dict.fromkeys(self.deferred) if frontier[row] == BOUNDED]
        if not rows:
            return lowest(values, wanted)
        deferred = np.array(rows)
        bounds = values[deferred]
        exact = values.copy()  # (``values`` may be the table's ratio column itself)
        exact[deferred] = math.inf
        order = lowest(exact, wanted)
        if order is None:
            return None  # a NaN: the loop decides
        best = [(exact.item(row), row) for row in order]
        self.table.take_flags()
        self.eviction.scoring = True
        try:
            term = self.table.term_at
            for k in np.argsort(bounds, kind="stable").tolist():
                if len(best) == wanted and not bounds.item(k) <= best[-1][0]:
                    break
                row = int(deferred[k])
                if (
                    len(best) == wanted
                    and term[row] == 0.0
                    and self.tighten(heuristic, values, row)
                    and not values.item(row) <= best[-1][0]
                ):
                    continue  # its tighter bound puts it past the shortlist
                entry = (self.settle_row(heuristic, values, row), row)
                if len(best) < wanted or entry < best[-1]:
                    bisect.insort(best, entry)
                    del best[wanted:]
        finally:
            self.eviction.scoring = False
        return lowest(values, wanted)

    def settle_lowest(self, heuristic: Heuristic, values: np.ndarray) -> list[int] | None:
        """``settle_deferred`` for the lowest alone: while the lowest of ``values`` (the
        first, on a tie) is a deferred row's bound, that row gets a tighter bound
        (``tighten``) or, when it has one, its term and exact score.
        Then it is a row scored exactly, and no deferred row can come before it: each
        one's score is at least its bound, and a bound equal to it lies after it."""
        table = self.table
        frontier, term = table.frontier, table.term_at
        table.take_flags()
        self.eviction.scoring = True
        try:
            first = int(values.argmin())  # the first NaN, if there is one
            while frontier[first] == BOUNDED:
                if not (term[first] == 0.0 and self.tighten(heuristic, values, first)):
                    self.settle_row(heuristic, values, first)
                first = int(values.argmin())
        finally:
            self.eviction.scoring = False
        return None if math.isnan(values.item(first)) else [first]

    def tighten(self, heuristic: Heuristic, values: np.ndarray, row: int) -> bool:
        """Give bounded ``row`` (term 0.0) a tighter lower bound for its h_DTR term, from
        its evicted neighbours alone, without building a closure: on each side the
        largest of their costs and of their valid cached closures' totals (each a
        subset of the side's union), the two sides added. True, with its score in
        ``values``, when the bound is above 0.0; the row stays ``BOUNDED``.

        A valid lower bound until the row is flagged again: the term only shrinks when a
        storage leaves the evicted set, and one that leaves flags the row if it is a
        neighbour (``_drop_around``) or in a valid closure the bound read (dropping that
        closure flags the rows next to it: ``_invalidate``); a closure dropped for any
        other reason flags them too. Closure totals are read only while the sums are
        exact (``closures.exact``): then each is its members' exact sum, and the term, a
        sum of more non-negative floats, cannot round below it."""
        if heuristic.cost != "estar":
            return False
        closures = self.eviction.neighbourhood
        exact, epoch = closures.exact, closures.epoch
        storage = self.table.storages[row]
        bound = 0.0
        for side, neighbours in (
            ("above", evicted_parents(storage)),
            ("below", evicted_children(storage)),
        ):
            largest = 0.0
            for neighbour in neighbours:
                value = neighbour.cost
                if exact:
                    closure = getattr(neighbour, side)
                    if closure is not None and closure.epoch == epoch:
                        value = closure.total
                if value > largest:
                    largest = value
            bound += largest
        if not 0.0 < bound < EXACT_BELOW:
            return False
        self.table.term_at[row] = bound
        self.rescore(heuristic, values, row)
        return True

    def settle_row(self, heuristic: Heuristic, values: np.ndarray, row: int) -> float:
        """Give deferred ``row`` its term, clearing its flag, and its exact score (returned)."""
        table = self.table
        value = neighbourhood_term(heuristic.cost, self.eviction, table.storages[row])
        table.term_at[row] = 0.0 if value is None else value
        table.frontier[row] = 0
        return self.rescore(heuristic, values, row)

    def rescore(self, heuristic: Heuristic, values: np.ndarray, row: int) -> float:
        """Write the ratio and score of ``row`` (whose term was just computed) into the
        ratio column and ``values``, by ``ratios`` and ``ratio_scores``'s operations, and
        return the score. The ratio column is then up to date for it."""
        table = self.table
        score = table.cost_at[row] + table.term_at[row]
        if heuristic.size:
            score = score / table.size_at[row]
        table.ratio_at[row] = score
        if heuristic.staleness:
            stale = self.eviction.allocator.clock - table.last_access_at[row]
            score = score / max(stale, MIN_STALENESS)
        values[row] = score
        return score

    def loop(self, pooled: list[Storage], runtime: Any) -> Choice:
        eviction = self.eviction
        eviction.scoring = True
        try:
            return choose_victim(
                pooled, runtime.heuristic, eviction.context, runtime.events is not None
            )
        finally:
            eviction.scoring = False

    def scores(self, heuristic: Heuristic, rows: np.ndarray | None, used: int) -> np.ndarray:
        """The scores of the pool's rows (every row when ``rows`` is None; then the flagged
        rows' may be lower bounds: ``neighbourhood_terms``)."""
        table = self.table
        clock = self.eviction.allocator.clock
        mode = heuristic.cost
        pick = slice(0, used) if rows is None else rows
        neighbourhood = None
        self.deferred = []
        if mode in NEIGHBOURHOOD_COST:
            neighbourhood = self.neighbourhood_terms(mode, rows, used)
        if rows is None and (
            type(neighbourhood) is not np.ndarray or neighbourhood.base is table.term
        ):
            # the table's ratio column, the score but for staleness, as the term column has it
            staleness = None
            if heuristic.staleness:
                staleness = np.subtract(clock, table.last_access[pick], out=table.scratch[pick])
            return ratio_scores(heuristic, ratios(table, mode, heuristic.size, used), staleness)
        table.ratio_key = None  # terms per storage, or a pool: the ratios are not kept
        table.rewritten = []
        staleness = None
        if heuristic.staleness:
            staleness = clock - table.last_access[pick]
        return scores(
            heuristic,
            table.cost[pick],
            neighbourhood,
            table.size[pick],
            staleness,
            table.unit[pick],
        )

    def pool_rows(self, min_size: float, sample: bool, used: int) -> np.ndarray:
        """``victims.pool`` on rows: the unlocked rows of the pool, in insertion order."""
        table = self.table
        rows = np.flatnonzero(table.active[:used])
        if min_size > 0.0 and rows.size:
            nbytes = table.nbytes[rows]
            threshold = min_size * (int(nbytes.sum()) / rows.size)
            rows = rows[nbytes >= threshold]
        if sample and rows.size > 4:
            stride = max(1, math.isqrt(rows.size))
            rows = rows[self.eviction.sampler.randrange(stride) :: stride]
        return rows[~table.blocked[rows]]

    def neighbourhood_terms(
        self, mode: str, rows: np.ndarray | None, used: int
    ) -> np.ndarray | float:
        """The neighbourhood part of the cost term for the scored rows (``rows``, or every
        row): what ``Heuristic.score`` adds, 0.0 where no neighbour is evicted.

        With every row scored and more than ``EAGER_TERMS`` flagged, ``estar``'s and
        ``ancestors``' flagged rows get 0.0 in the ``term`` column instead, and the flag
        ``BOUNDED``. A term is never negative, so their scores are lower bounds, by the
        same operations (a sum that does not decrease, divisions by the same positive
        numbers; costs are never negative: ``costs.py``); ``choose`` computes the terms
        of those whose bound could put them among the lowest (``settle_lowest``,
        ``settle_deferred``), and the rest wait, bounded, for a later decision, by
        which their closures may have changed again. Most flagged rows
        border a large evicted region and score far above the victim. A bounded row
        flagged again keeps its bound (it holds for any term) and is bounded again.

        ``eq`` is computed from the table's ``edges`` and the mirrored classes
        (``eqterms.py``); ``estar`` and ``ancestors`` per storage for the flagged rows
        only, into the ``term`` column, which keeps every other row's term (a row is
        flagged whenever a closure or walk its term read may have changed: table.py).
        Whatever the table cannot do exactly (a class to rebuild after a mode switch) is
        done per storage for every row, in insertion order, as the loop does, so that
        the union-find classes built along the way are the same."""
        eviction, table = self.eviction, self.table
        closures = eviction.neighbourhood
        eq = eviction.eq_classes
        epoch = eq.epoch if mode == "eq" else closures.epoch if mode == "estar" else 0
        if table.watching != mode or table.watched_epoch != epoch:
            table.watch(mode, epoch)
            closures.flagged = table if mode == "estar" else None
        if mode == "estar" and closures.pending:
            closures.flush()  # the evictions not yet announced flag their neighbours' rows
        if mode == "eq":
            eviction.scoring = True
            try:
                terms = eq_terms(eviction, table, rows, used)
            finally:
                eviction.scoring = False
            if terms is not None:
                return terms
            return self.terms_by_storage(mode, rows, used)
        if rows is None:
            self.bound_terms(mode, used)
        else:
            stale = flagged_rows(table, rows, used)
            if stale:
                self.update_terms(mode, stale)
        return table.term[:used] if rows is None else table.term[rows]

    def bound_terms(self, mode: str, used: int) -> None:
        """Every row scored: the flagged rows' terms, or bounds for them (``deferred``).

        ``bounded`` lists the rows flagged ``BOUNDED``, and rows that are no longer so
        (settled, flagged again, holes), some twice: a short list is re-read at each
        decision, a long one only when it has doubled since it was last re-read, so
        that a decision among many bounded rows that stay bounded (most of them, most of
        the time) does not read them all. Whatever it lists is ``deferred``: the search
        reads a row's flag before taking its score for a bound (``settle_lowest``,
        ``settle_deferred``). A long list that holds fewer bounded rows than it seems
        only sends at most ``EAGER_TERMS`` new rows down the bounded way instead of
        having their terms computed at once: the same decision either way."""
        table = self.table
        frontier = table.frontier
        if frontier is not self.bounded_in:  # squeezed (renumbered) or watched afresh
            self.bounded_in = frontier
            self.bounded = np.flatnonzero(np.frombuffer(frontier, np.uint8) == BOUNDED).tolist()
            self.filter_at = FILTER_BOUNDED
        bounded = self.bounded
        reread = len(bounded) <= FILTER_BOUNDED or len(bounded) > self.filter_at
        if reread:  # (each row once again)
            bounded = [row for row in dict.fromkeys(bounded) if frontier[row] == BOUNDED]
        new = flagged_rows(table, None, used)
        if len(bounded) + len(new) <= EAGER_TERMS:
            self.bounded = []
            if bounded or new:
                self.update_terms(mode, sorted(bounded + new))
            return
        term = table.term_at
        for row in new:
            term[row] = 0.0
            frontier[row] = BOUNDED
        table.rewritten += new
        bounded += new
        self.bounded = self.deferred = bounded
        if reread:
            self.filter_at = max(FILTER_BOUNDED, 2 * len(bounded))

    def update_terms(self, mode: str, stale: list[int]) -> None:
        """Compute the terms of flagged rows ``stale`` into the ``term`` column, and clear
        their flags."""
        eviction, table = self.eviction, self.table
        table.take_flags()
        storages, term, frontier = table.storages, table.term, table.frontier
        eviction.scoring = True
        try:
            for row in stale:
                value = neighbourhood_term(mode, eviction, storages[row])
                term[row] = 0.0 if value is None else value
                frontier[row] = 0
        finally:
            eviction.scoring = False
        table.rewritten += stale

    def terms_by_storage(self, mode: str, rows: np.ndarray | None, used: int) -> np.ndarray:
        """Terms per storage (``neighbourhood_term``) for every scored row, in row order."""
        eviction, table = self.eviction, self.table
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
        eviction.scoring = True
        try:
            for row in chosen:
                value = neighbourhood_term(mode, eviction, storages[row])
                values.append(0.0 if value is None else value)
        finally:
            eviction.scoring = False
        terms[positions] = values
        return terms


def neighbourhood_term(mode: str, eviction: Eviction, storage: Storage) -> float | None:
    """The neighbourhood part of cost term ``mode`` of a resident storage, by the same
    arithmetic as ``ScoreContext``'s, or None when no neighbour is evicted (the term is
    then 0.0). Reads the neighbours once."""
    parents = evicted_parents(storage)
    children = evicted_children(storage)
    if not parents and not children:
        return None
    if mode == "estar":
        return eviction.neighbourhood.cost_around(parents, children)
    if mode == "eq":
        return eviction.eq_classes.cost_around(parents + children)
    return estar.total_cost(estar.walk(parents, evicted_parents))


def staleness_floor(n: int) -> np.ndarray:
    """``n`` copies of ``MIN_STALENESS`` (a view of one shared array): ``np.maximum`` of
    two arrays takes a third of the time of an array and a scalar."""
    global _FLOOR
    if len(_FLOOR) < n:
        _FLOOR = np.full(max(n, 2 * len(_FLOOR)), MIN_STALENESS)
    return _FLOOR[:n]


def scores(
    heuristic: Heuristic,
    cost: np.ndarray,
    neighbourhood: np.ndarray | float | None,
    size: np.ndarray,
    staleness: np.ndarray | None,
    unit: np.ndarray | None = None,
) -> np.ndarray:
    """``heuristic.score`` of many storages at once, from arrays of their cost c,
    neighbourhood cost (ignored when the cost term has none), size as a float
    ``max(m, 1)``, staleness ``clock - last_access`` (overwritten; ignored without the
    staleness term) and ``unit``, the cost term ``none``'s 1.0 per storage (ones when
    omitted; the candidate table's has +inf for rows it does not score). The same
    floating-point operations in the same order as ``score``, so the same floats; the
    arrays given are not modified, except ``staleness``."""
    fresh = False  # whether ``top`` is an array of our own, to divide in place
    if heuristic.cost == "none":
        top = np.ones(len(cost)) if unit is None else unit
    elif heuristic.cost == "local" or (type(neighbourhood) is float and neighbourhood == 0.0):
        top = cost  # c + 0.0 is c (costs are not -0.0)
    else:
        top = cost + neighbourhood
        fresh = True
    if heuristic.staleness:
        staleness = np.maximum(staleness, staleness_floor(len(staleness)), out=staleness)
        if heuristic.size:
            value = np.divide(top, size, out=top if fresh else None)
            value /= staleness
            return value
        return np.divide(top, staleness, out=top if fresh else None)
    if heuristic.size:
        return np.divide(top, size, out=top if fresh else None)
    return top if fresh else np.array(top, float)


def ratio_scores(
    heuristic: Heuristic, ratio: np.ndarray, staleness: np.ndarray | None
) -> np.ndarray:
    """``scores`` from ``ratio``, each storage's cost term divided by its size term (by the
    same operations: ``ratios``) and its staleness ``clock - last_access``
    (ignored without the staleness term): the scores, in ``staleness`` (overwritten), or
    ``ratio`` itself (not to be modified) without staleness."""
    if not heuristic.staleness:
        return ratio
    staleness = np.maximum(staleness, staleness_floor(len(staleness)), out=staleness)
    return np.divide(ratio, staleness, out=staleness)


def ratios(table: CandidateTable, mode: str, size: bool, used: int) -> np.ndarray:
    """``table.ratio[:used]`` for cost term ``mode`` (``term`` must hold its neighbourhood
    part) and with the size term or not, recomputing the ``rewritten`` rows (every
    row when they are many or the formula changed)."""
    ratio = table.ratio
    rows, table.rewritten = table.rewritten, []
    if table.ratio_key != (mode, size) or len(rows) > RATIOS_ONE_BY_ONE:
        pick = slice(0, used)
        if mode == "none":
            top = table.unit[pick]
        elif mode == "local":
            top = table.cost[pick]
        else:
            top = np.add(table.cost[pick], table.term[pick], out=ratio[pick])
        if size:
            np.divide(top, table.size[pick], out=ratio[pick])
        elif top.base is not ratio:
            ratio[pick] = top
        table.ratio_key = (mode, size)
        return ratio[pick]
    cost, term, out, divisor = table.cost_at, table.term_at, table.ratio_at, table.size_at
    if mode == "none":
        cost = table.unit_at
    if mode in ("none", "local"):
        for row in rows:
            out[row] = cost[row] / divisor[row] if size else cost[row]
    else:
        for row in rows:
            top = cost[row] + term[row]
            out[row] = top / divisor[row] if size else top
    return ratio[:used]


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

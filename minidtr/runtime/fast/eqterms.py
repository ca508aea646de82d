"""Accelerates ``EquivalenceClasses.cost`` over many candidates: h_DTR^eq's term for
the scored rows, from the rows' edges (``borders.py``) and the mirrored classes
(``mirror.py``), recomputing only the rows whose neighbours or classes changed since
the last decision.

Equivalent per storage: a row's term is the summed cost of the distinct classes of
its evicted neighbours, in neighbour order, adding 0.0 for a repeat or padding: the
same floats as ``EquivalenceClasses.cost_around``. When a neighbour's class must be
rebuilt first (after a new epoch), ``eq_terms`` gives up (None) and the search takes
the terms per storage in the loop's order, so that the classes rebuilt along the way
are the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .borders import CHILD_KEY, WIDE, bordering_index, narrow, settle_span, span
from .table import SYNC_ONE_BY_ONE, flagged_rows

if TYPE_CHECKING:
    from ..eviction import Eviction
    from .mirror import ClassMirror
    from .table import CandidateTable

MIRROR_SLACK = 1024  # the mirror is rebuilt past 8 * (table rows + this) entries
BORDER_SCAN_SHARE = 32  # rows of touched classes beyond 1/this of the table: scan the labels


def eq_terms(
    eviction: Eviction, table: CandidateTable, rows: np.ndarray | None, used: int
) -> np.ndarray | float | None:
    """h_DTR^eq's ``c(eq(t))`` for the scored rows from the table's ``term`` column:
    re-read the flagged rows' evicted neighbours into ``edges``, take the rows whose
    edges the changes updated (``pending``), find the rows whose classes changed
    since the last decision (the mirror's ``touched`` labels among the table's
    ``labels``) and recompute the terms of all three (``eq_few`` when the first two
    are a few, ``eq_recompute``). None
    when a neighbour's class must be rebuilt first (the per-storage path does that,
    in the reference's order; the rows re-read meanwhile are flagged again).

    Only re-read rows can name a class of an old epoch: a new epoch flags every row
    (``CandidateTable.watch``), and a class of the current epoch stays current."""
    eq = eviction.eq_classes
    mirror = eq.listener
    if mirror.size > 8 * (used + MIRROR_SLACK):  # indices of long-gone classes pile up
        mirror.reset()
        table.edges[:] = 0
        table.labels[:] = 0
        table.keys[:] = 0
        table.edge_width = 0
        table.wide = {}
        table.watch("eq", eq.epoch)
    read = eq_read(eviction, table, flagged_rows(table, rows, used))
    if read is None:
        return None
    if table.pending:
        eq_pending(table, read)
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
        eq_few(mirror, table, read, width, used)
    else:
        changed = stale
        if mirror.touched:
            changed = eq_changed_rows(mirror, table, stale, width, used)
        eq_recompute(mirror, table, changed, width, stale)
        table.rewritten += changed
    return table.term[:used] if rows is None else table.term[rows]


def eq_read(eviction: Eviction, table: CandidateTable, stale: list[int]) -> list | None:
    """Re-read the evicted neighbours of the ``stale`` rows into ``edges`` (their
    mirror indices, parents first, and order keys into ``keys``) and clear their
    flags: the rows, or None when a neighbour's class must be rebuilt first (the
    rows read meanwhile are flagged again)."""
    if not stale:
        return []
    eq = eviction.eq_classes
    mirror = eq.listener
    owner = table.owner
    storages, frontier = table.storages, table.frontier
    epoch, generation, index_of = eq.epoch, mirror.generation, mirror.index_of
    read = []
    for row in stale:
        storage = storages[row]
        parents = storage.parents
        nodes = []
        keys = []  # order keys: a parent's place among the parents, a child's id + CHILD_KEY
        for place, neighbour in enumerate((*parents, *storage.live_children())):
            if (
                neighbour.buffer is not None
                or neighbour.banished
                or neighbour.allocator is not owner
            ):
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
        edges, keys_at = table.edges_at, table.keys_at  # 0 from the row's span on
        for j, node in enumerate(nodes):
            edges[j][row] = node
            keys_at[j][row] = keys[j]
        held = span(table, row)
        for j in range(count, held):
            edges[j][row] = keys_at[j][row] = 0
        if count > WIDE and count > held:
            table.wide[row] = count
        frontier[row] = 0
        read.append(row)
    return read


def eq_pending(table: CandidateTable, read: list[int]) -> None:
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


def eq_few(mirror: ClassMirror, table: CandidateTable, read: list, width: int, used: int) -> None:
    """``c(eq)`` after a few rows were re-read (``eq_read``): theirs, from the
    indices just read, each moved in ``table.bordering`` to its new labels (after
    the merges since the last decision were applied to it), then that of the other
    rows naming a label the mirror touched (``eq_recompute``), found in the index
    or, when they are more than 1/``BORDER_SCAN_SHARE`` of the rows, by a scan of
    the ``labels`` columns."""
    touched = mirror.touched
    index = table.bordering
    if touched:
        mirror.touched = set()
        if index is None or mirror.merged:
            index = eq_merged_index(mirror, table, width)
    label, cost = mirror.label_at, mirror.cost_at
    edges, labels, term = table.edges_at, table.labels_at, table.term_at
    wide, inside = table.wide, narrow(table)
    for row in read:
        seen = set()  # (a list was quadratic in a wide row)
        left = []  # the labels this row's changed positions named, and now name
        entered = []
        total = 0.0
        for j in range(wide.get(row) or inside):
            found = label[edges[j][row]]  # padding: 0, of cost 0.0
            if found not in seen:
                seen.add(found)
                total += cost[found]
            at = labels[j]
            was = at[row]
            if was != found:
                at[row] = found
                left.append(label[was])  # a retired label as the one that took it
                entered.append(found)
        term[row] = total
        if row in wide:
            settle_span(table, row)
        if index is not None and left:
            move_in_border_index(index, row, left, seen, entered)
    table.rewritten += read
    others = rows_naming(table, index, touched, read, width, used) if touched else []
    if others:
        eq_recompute(mirror, table, others, width, [])
        table.rewritten += others


def rows_naming(
    table: CandidateTable, index: dict, touched: set, read: list, width: int, used: int
) -> list[int]:
    """The rows other than ``read`` whose labels name one of ``touched``: from ``index``,
    or, when they are more than 1/``BORDER_SCAN_SHARE`` of the rows, by a scan of the
    ``labels`` columns."""
    found = []
    listed = 0
    for name in touched:
        rows = index.get(name)
        if rows:
            found.append(rows)
            listed += len(rows)
    if not found:
        return []
    if listed * BORDER_SCAN_SHARE <= used:
        others = set().union(*found)
        others.difference_update(read)
        return list(others)
    hit = naming_mask(table, touched, width, used)
    hit[read] = False
    return np.flatnonzero(hit).tolist()


def naming_mask(table: CandidateTable, names: set, width: int, used: int) -> np.ndarray:
    """Which of the first ``used`` rows have a label in ``names``: a scan of the ``labels``
    columns up to ``narrow``, then of each wide row's positions past it."""
    inside = min(width, WIDE)
    columns = table.labels[:inside, :used]
    hit = np.zeros(used, bool)
    for name in names:
        for j in range(inside):
            hit |= columns[j] == name
    if table.wide:
        wanted = np.fromiter(names, np.int64, len(names))
        for row, last in table.wide.items():
            if row < used and np.isin(table.labels[inside:last, row], wanted).any():
                hit[row] = True
    return hit


def eq_merged_index(mirror: ClassMirror, table: CandidateTable, width: int) -> dict[int, set[int]]:
    """``table.bordering`` (built from the ``labels`` columns if need be) with each
    label a merge retired since the last decision moved onto the label that took
    its members (the smaller set into the larger)."""
    index = bordering_index(table, width)
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


def eq_changed_rows(
    mirror: ClassMirror, table: CandidateTable, stale: list[int], width: int, used: int
) -> list[int]:
    """The rows whose ``c(eq)`` to recompute, in row order: the re-read ones and those
    naming a label the mirror touched since the last decision. Those are found in
    ``table.bordering`` (first moving each label a merge retired onto the label that
    took its members, the smaller set into the larger) or, when they are more than
    1/``BORDER_SCAN_SHARE`` of the rows, by one scan of the ``labels`` columns per
    touched label and neighbour position."""
    index = eq_merged_index(mirror, table, width)
    touched, mirror.touched = mirror.touched, set()
    found = [rows for label in touched if (rows := index.get(label))]
    if sum(map(len, found)) * BORDER_SCAN_SHARE <= used:
        changed = set(stale)
        changed.update(*found)
        return sorted(changed)
    hit = naming_mask(table, touched, width, used)
    hit[stale] = True
    return np.flatnonzero(hit).tolist()


def eq_recompute(
    mirror: ClassMirror, table: CandidateTable, rows: list[int], width: int, reread: list[int]
) -> None:
    """``c(eq)`` of ``rows`` into ``term`` (their labels into ``labels``): each row's
    distinct classes' costs summed in neighbour order, adding 0.0 for a repeat or
    padding, so the same floats as ``EquivalenceClasses.cost`` (row by row when they
    are a few or wide, as arrays when many). The ``reread`` rows' entries in
    ``table.bordering`` follow their new labels (the other rows' labels change only
    by merges, which ``eq_changed_rows`` applied to it); when they are many, the
    index is dropped, to be rebuilt from the columns when next needed."""
    index = table.bordering
    if index is not None and len(reread) > SYNC_ONE_BY_ONE:
        index = table.bordering = None
    before: dict[int, list] = {}  # each re-read row's labels, a retired one as its taker
    after: dict[int, list] = {}  # ... and its new labels
    moved = set(reread) if index is not None else ()
    if len(rows) <= SYNC_ONE_BY_ONE:
        recompute_each(mirror, table, rows, moved, before, after)
    else:
        wide = table.wide
        if wide:
            recompute_each(mirror, table, [r for r in rows if r in wide], moved, before, after)
            rows = [r for r in rows if r not in wide]
        recompute_arrays(mirror, table, rows, min(width, WIDE), moved, before)
    for row, old in before.items():
        new = after.get(row)
        if new is None:
            new = table.labels[: span(table, row), row].tolist()
        move_in_border_index(index, row, old, new, new)


def recompute_each(
    mirror: ClassMirror, table: CandidateTable, rows: list[int], moved, before, after
) -> None:
    """``eq_recompute`` row by row, over each row's span; the labels of the ``moved`` rows
    before and after go into ``before`` and ``after``."""
    label, cost = mirror.label_at, mirror.cost_at
    edges, labels, term = table.edges_at, table.labels_at, table.term_at
    wide, inside = table.wide, narrow(table)
    for row in rows:
        held = wide.get(row) or inside
        if row in moved:
            before[row] = [label[labels[j][row]] for j in range(held)]
        seen = set()
        total = 0.0
        for j in range(held):
            found = label[edges[j][row]]
            labels[j][row] = found
            if found not in seen:
                seen.add(found)
                total += cost[found]
        term[row] = total
        if row in wide:
            settle_span(table, row)
        if row in moved:
            after[row] = seen


def recompute_arrays(
    mirror: ClassMirror, table: CandidateTable, rows: list[int], width: int, moved, before
) -> None:
    """``eq_recompute`` of narrow rows as arrays ``width`` positions deep; the labels of
    the ``moved`` rows before go into ``before``."""
    if moved:
        label = mirror.label
        for row in moved:
            if row not in before:
                before[row] = label[table.labels[:width, row]].tolist()
    if not rows:
        return
    index_rows = np.array(rows, np.intp)
    labels = mirror.label.take(table.edges[:width, index_rows])
    table.labels[:width, index_rows] = labels
    costs = mirror.cost.take(labels)
    if width > 1:
        # a label met earlier in its column is a repeat: sorted stably, each run of
        # equal labels starts with its first (a pairwise test was O(width^2) arrays)
        order = np.argsort(labels, axis=0, kind="stable")
        ordered = np.take_along_axis(labels, order, axis=0)
        sorted_repeat = np.zeros(labels.shape, bool)
        np.equal(ordered[1:], ordered[:-1], out=sorted_repeat[1:])
        repeat = np.empty_like(sorted_repeat)
        np.put_along_axis(repeat, order, sorted_repeat, axis=0)
        costs[repeat] = 0.0
    terms = costs[0]  # 0.0 + c is c
    for j in range(1, width):
        terms += costs[j]
    table.term[index_rows] = terms


def move_in_border_index(index: dict, row: int, left, kept, entered) -> None:
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

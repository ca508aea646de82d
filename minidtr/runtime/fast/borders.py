"""h_DTR^eq's classes in the candidate table: each row's evicted neighbours as columns.

Under ``eq`` each row of the candidate table (``table.py``) keeps its evicted
neighbours in ``edges``: the mirrored union-find indices (``mirror.py``) of their
nodes, parents then children in the order ``Storage.neighbours`` gives, padded with
0 (the mirror's empty class). ``edges[j, row]`` is the row's j-th: one contiguous
array per position, ``edge_width`` of them in use. The changes keep them: each
eviction puts the evicted storage into its neighbours' rows and each storage
leaving the evicted set takes itself out (``border_evicted``, ``border_left``), at
the place its order key in ``keys`` gives (a parent's place among the row's
parents; ``CHILD_KEY`` plus a child's id, since a storage's children are listed in
the order they were made), and list the rows in ``pending``. A flag here means
"``edges`` is stale" (a new row, a new epoch, a renumbering by compaction): the
changes leave such a row alone, and a decision re-reads its neighbours from the
graph. ``labels`` holds the edges' class labels as of the row's last ``term``, so
that a decision recomputes the term of the pending and re-read rows and of those
naming a class that changed since (the mirror's ``touched`` labels) only.
``bordering`` finds the latter without a scan: each label to the rows whose
``labels`` name it (a superset: a row that became a hole may stay listed until the
next compaction, which drops the whole index, to be rebuilt from the columns;
``eqterms.py`` keeps it).

A row with more than ``WIDE`` evicted neighbours (a value with hundreds of evicted
children) is *wide*: ``table.wide`` maps it to its span, the positions that may hold
anything in its columns. Every other row holds nothing past ``narrow(table)``, so
the loops and scans over all rows stop there and take the few wide rows one by one:
one wide row no longer pads every row's work to its width.

Equivalent to ``EquivalenceClasses.cost`` per storage (``eqterms.py`` sums the
same classes in the same order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..storage import Storage

if TYPE_CHECKING:
    from .table import CandidateTable

CHILD_KEY = 1 << 40  # the order key of a child edge: this plus the child's id
WIDE = 32  # a row with more evicted neighbours than this is kept apart (``table.wide``)


def narrow(table: CandidateTable) -> int:
    """The positions past which only wide rows hold anything."""
    width = table.edge_width
    return width if width < WIDE else WIDE


def span(table: CandidateTable, row: int) -> int:
    """The positions ``row`` may hold anything in (``edges``, ``labels``)."""
    return table.wide.get(row) or narrow(table)


def settle_span(table: CandidateTable, row: int) -> None:
    """A wide row's labels were just rewritten from its edges: its span is its edges."""
    edges = table.edges_at
    count = 0
    while count < table.edge_width and edges[count][row]:
        count += 1
    if count > WIDE:
        table.wide[row] = count
    else:
        del table.wide[row]


def renumbered(table: CandidateTable, kept: list[int], inside: int) -> None:
    """``compact`` moved the rows ``kept`` (their old numbers, in order) to 0, 1, ...: the
    ``bordering`` index is dropped, and the wide rows keep their spans, except rows from
    ``inside`` on, whose columns it cleared."""
    table.bordering = None
    wide = table.wide
    if wide:
        table.wide = {new: wide[old] for new, old in enumerate(kept[:inside]) if old in wide}


def border_evicted(table: CandidateTable, storage: Storage, index: int) -> None:
    """(eq) ``storage`` was just evicted, its union-find node mirrored as ``index``:
    add it to the edges of each neighbour's row (see ``border``)."""
    border_around(table, storage, index)


def border_left(table: CandidateTable, storage: Storage) -> None:
    """(eq) ``storage`` left the evicted set: take it out of its neighbours' edges."""
    border_around(table, storage, 0)


def border_around(table: CandidateTable, storage: Storage, index: int) -> None:
    """Put ``storage`` into (``index`` > 0) or take it out of (0) its neighbours' edges."""
    frontier = table.frontier
    owner = table.owner
    known = len(frontier)  # rows past it are flagged
    key = CHILD_KEY + storage.id  # its key in its parents' rows
    for parent in storage.parents:
        row = parent.row
        if 0 < row < known and not frontier[row] and parent.allocator is owner:
            border(table, row, key, index)
    for child in storage.live_children():
        row = child.row
        if 0 < row < known and not frontier[row] and child.allocator is owner:
            parents = child.parents
            if storage in parents:
                border(table, row, parents.index(storage), index)
            else:  # not a parent of its child any more: let a re-read decide
                frontier[row] = 1


def border(table: CandidateTable, row: int, key: int, index: int) -> None:
    """Insert the evicted neighbour with order ``key`` and mirror index ``index`` into
    row ``row``'s edges, or take it out (``index`` 0), keeping the edges in
    ``key`` order, and list the row in ``pending`` (its term is stale). A row
    flagged for a re-read is left to it, and so is one whose edges do not hold
    what this change expects (the re-read finds the truth)."""
    frontier = table.frontier
    if frontier[row]:
        return
    if row in table.wide:
        border_wide(table, row, key, index)
        return
    edges, keys, width = table.edges_at, table.keys_at, table.edge_width
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
            if width == len(table.edges):
                table.widen(width + 1)
                edges, keys = table.edges_at, table.keys_at
            table.edge_width = width + 1
        for j in range(count, place, -1):
            edges[j][row] = edges[j - 1][row]
            keys[j][row] = keys[j - 1][row]
        edges[place][row] = index
        keys[place][row] = key
        if count >= WIDE and count >= table.wide.get(row, 0):
            table.wide[row] = count + 1
    table.pending.append(row)


def border_wide(table: CandidateTable, row: int, key: int, index: int) -> None:
    """``border`` for a wide row: the same edges, found and shifted as slices of its
    columns (a loop per position made each change as slow as the row is wide)."""
    held = table.wide[row]
    edges, keys = table.edges[:held, row], table.keys[:held, row]
    empty = np.flatnonzero(edges == 0)
    count = int(empty[0]) if len(empty) else held
    after = np.flatnonzero(keys[:count] >= key)
    place = int(after[0]) if len(after) else count
    there = place < count and keys[place] == key
    if there == bool(index):  # already there, or not there to take out
        table.frontier[row] = 1
        return
    if not index:
        edges[place : count - 1] = edges[place + 1 : count]
        keys[place : count - 1] = keys[place + 1 : count]
        edges[count - 1] = keys[count - 1] = 0
    else:
        if count == table.edge_width:
            if count == len(table.edges):
                table.widen(count + 1)
            table.edge_width = count + 1
        edges, keys = table.edges[: count + 1, row], table.keys[: count + 1, row]
        edges[place + 1 :] = edges[place:count]
        keys[place + 1 :] = keys[place:count]
        edges[place] = index
        keys[place] = key
        table.wide[row] = max(held, count + 1)
    table.pending.append(row)


def bordering_index(table: CandidateTable, width: int) -> dict[int, set[int]]:
    """``table.bordering`` as the ``labels`` columns give it (built afresh when None)."""
    if table.bordering is None:
        index: dict[int, set[int]] = {}
        inside = min(width, WIDE)
        positions, rows = np.nonzero(table.labels[:inside, : len(table.storages)])
        names = table.labels[positions, rows].tolist()
        rows = rows.tolist()
        for row, last in table.wide.items():
            beyond = table.labels[inside:last, row]
            beyond = beyond[beyond != 0].tolist()
            names += beyond
            rows += [row] * len(beyond)
        for label, row in zip(names, rows, strict=True):
            found = index.get(label)
            if found is None:
                index[label] = {row}
            else:
                found.add(row)
        table.bordering = index
    return table.bordering

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
    table.pending.append(row)


def bordering_index(table: CandidateTable, width: int) -> dict[int, set[int]]:
    """``table.bordering`` as the ``labels`` columns give it (built afresh when None)."""
    if table.bordering is None:
        index: dict[int, set[int]] = {}
        positions, rows = np.nonzero(table.labels[:width, : len(table.storages)])
        names = table.labels[positions, rows].tolist()
        for label, row in zip(names, rows.tolist(), strict=True):
            found = index.get(label)
            if found is None:
                index[label] = {row}
            else:
                found.add(row)
        table.bordering = index
    return table.bordering

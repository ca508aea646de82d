"""Accelerates the window heuristic's gathering (``window.WindowCosts``): the arena's blocks
as arrays in address order, each with the candidate table's row of the value in it.

The readable decision walks every block, asks each one's storage whether it may be
evicted and what evicting it would cost: a Python call per block (about 0.6 ms at 10^4
blocks). Here the arena's ``listener`` keeps two arrays in address order as blocks are
added and removed (from the first decision of a window heuristic run accelerated on;
``array.array``s, whose ``insert`` and ``del`` move the tail in C at a tenth of a NumPy
call's cost, copied into NumPy arrays at a decision):

- ``bounds``: each block's start address, and after the last one the arena's end;
- ``rows``: -1 for a free block, else the table row (``fast/table.py``) of the value
  in it, or 0 while it has none (a constant, a pinned value, a block reserved for the
  op that is running: a wall).

The arrays are kept once a decision finds ``ARRAY_BLOCKS`` blocks or more (then for the
arena's life): a smaller arena is walked in Python at each decision, as the readable
decision does (``gathered_window``), and slid by arrays.

A decision then reads each block's cost from the table's columns in one gather: the
per-row costs are a few array operations (the same floating-point operations as
``WindowHeuristic.window_cost``), blocked rows (locked, or holes) cost ``inf``, and a
free block reads the 0.0 put after the last row.

**Keeping ``rows`` true.** A block's row is known when it is added with its storage
(``ContiguousFit`` places a storage laid out afresh with its owner), and otherwise
found from the table's side: ``refresh`` looks up the block of each row appended to the
table since the last decision (``ContiguousFit.placed``; an op's outputs become
candidates before their blocks are given to them). Rows are append-only, so a row
recorded stays its storage's until the table squeezes its holes or is emptied, which
gives its rows a new ``numbering``: every row is then looked up again. A row that became a
hole (the value was pinned or made a constant) is blocked in the table: a wall, as
the readable decision says. ``check`` compares all of it with the arena (tests).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..arena import Arena, Block
from .search import staleness_floor
from .windows import cheapest_run_at

if TYPE_CHECKING:
    from ..placement import ContiguousFit
    from ..window import WindowCosts
    from .table import CandidateTable

FREE = -1  # ``rows`` of a free block
# blocks from which the arrays are kept: below, NumPy's fixed costs and the arrays' upkeep
# (about a microsecond an op) outweigh asking each block in Python (2-3 us a block); the
# bundled traces' replays under the window were fastest with the LSTM's arena (55 blocks)
# below and the others' (116 to 580) above
ARRAY_BLOCKS = 64


class BlockColumns:
    """The blocks of ``fit.arena`` as arrays in address order (see the module docstring)."""

    def __init__(self, fit: ContiguousFit):
        self.fit = fit
        self.arena: Arena = fit.arena
        self.bounds = array("d", [0.0])  # the last: the arena's end (``block_bounds``)
        self.rows = array("q")
        self.seen = 0  # the table's ``numbering`` the rows refer to
        self.seen_rows = 0  # rows of it looked up so far
        self.waiting: list[int] = []  # rows looked up before their storage had a block
        for index, start in enumerate(self.arena.starts):
            self.added(index, self.arena.at[start])
        self.arena.listener = self

    # ---- the arena's listener ----------------------------------------------------------------

    def added(self, index: int, block: Block) -> None:
        self.bounds.insert(index, block.start)
        self.rows.insert(index, FREE if block.free else row_of(block))

    def removed(self, index: int) -> None:
        del self.bounds[index]
        del self.rows[index]

    # ---- a decision ----------------------------------------------------------------------------

    def refresh(self, table: CandidateTable) -> None:
        """Give the blocks of the table's rows added since the last call their rows (every
        row, when the table renumbered them since)."""
        storages, rows = table.storages, self.rows
        if table.numbering != self.seen:
            self.seen, self.seen_rows, self.waiting = table.numbering, 1, []
            self.rows = rows = array("q", np.minimum(np.frombuffer(rows, np.int64), 0).tobytes())
        looked_up = [*self.waiting, *range(self.seen_rows, len(storages))]
        self.seen_rows = len(storages)
        self.waiting = []
        placed, starts = self.fit.placed, self.arena.starts
        for row in looked_up:
            storage = storages[row]
            if storage is None or not storage.nbytes:
                continue  # a hole (no candidate any more), or a value that takes no block
            block = placed.get(storage.id)
            if block is None:
                self.waiting.append(row)  # its block is still to be given to it
            else:
                rows[bisect.bisect_left(starts, block.start)] = row

    def block_rows(self) -> np.ndarray:
        """``rows`` of every block, in address order: a copy (a few microseconds), as no
        view may outlive the call: an ``array`` read by NumPy cannot grow or shrink, and
        an error's traceback could keep a view until the arena changes again."""
        return np.frombuffer(self.rows, np.int64).copy()

    def block_bounds(self) -> np.ndarray:
        """``bounds`` of every block, then the arena's end (a copy, as ``block_rows``)."""
        self.bounds[-1] = self.arena.size
        return np.frombuffer(self.bounds, np.float64).copy()

    def check(self, table: CandidateTable) -> None:
        """Raise AssertionError unless the arrays say what the arena and the table say
        (after ``refresh``): each block's start, and free, a wall, or the row of the
        candidate in it."""
        blocks = list(self.arena.blocks())
        assert len(self.rows) == len(blocks), (len(self.rows), len(blocks))
        assert self.bounds.tolist()[:-1] == [b.start for b in blocks]
        for block, row in zip(blocks, self.rows.tolist(), strict=True):
            if block.free:
                assert row == FREE, block
                continue
            storage = None if block.owner is None else block.owner()
            candidate = storage is not None and storage.row and storage in table
            if candidate and not table.blocked[storage.row]:
                assert row == storage.row, (block, row, storage.row)
            else:
                assert row == 0 or table.blocked[row], (block, row)  # a wall either way


def row_of(block: Block) -> int:
    """The table row of the storage a block is added with (0: none yet)."""
    storage = None if block.owner is None else block.owner()
    return 0 if storage is None else storage.row


class AddressOrder:
    """The arena's blocks in address order, looked up one index (or slice) at a time."""

    def __init__(self, arena: Arena):
        self.arena = arena

    def __len__(self) -> int:
        return len(self.arena.starts)

    def __getitem__(self, index: Any) -> Any:
        at, starts = self.arena.at, self.arena.starts
        if isinstance(index, slice):
            return [at[start] for start in starts[index]]
        return at[starts[index]]


def cheapest_window(
    fit: ContiguousFit, heuristic: Any, need: int, costs_of: Callable[..., WindowCosts]
) -> tuple[WindowCosts, tuple[float, int, int] | None]:
    """``window.window_victims``' decision from the arrays: the window's ``WindowCosts``
    (``costs_of(blocks, heuristic, context)``, for the exact costs of the runs near the
    cheapest and the values of the chosen one) and the run, as the readable decision
    finds them."""
    allocator = fit.allocator
    eviction = allocator.eviction
    table = eviction.candidates
    fast = allocator.fast
    columns = fast.columns
    if columns is None or columns.fit is not fit or columns.arena is not fit.arena:
        if len(fit.arena.starts) < ARRAY_BLOCKS:
            return gathered_window(fit, heuristic, need, costs_of)
        columns = fast.columns = BlockColumns(fit)
    table.sync()
    used = table.rows
    columns.refresh(table)
    is_open = np.zeros(used + 1, bool)  # an unblocked row; last: a free block's (-1)
    np.logical_not(table.blocked[:used], out=is_open[:used])
    is_open[0] = False  # row 0 is scratch: a wall
    eviction.search.neighbourhood_terms("estar", np.flatnonzero(is_open), used)
    stale = np.maximum(allocator.clock - table.last_access[:used], staleness_floor(used))
    per_row = np.empty(used + 1)
    np.divide(table.cost[:used] + table.term[:used], stale, out=per_row[:used])
    per_row[0], per_row[used] = np.inf, 0.0
    rows = columns.block_rows()
    costs = per_row.take(rows)
    window = costs_of(AddressOrder(fit.arena), heuristic, eviction.context)
    window.costed = int(np.count_nonzero(is_open.take(rows)))
    lower = None
    if getattr(heuristic, "once", False):
        per_row[:used] = np.where(is_open[:used], table.cost[:used] / stale, 0.0)
        lower = per_row.take(rows)
    eviction.scoring = True
    try:
        once = window.run_cost if lower is not None else None
        run = cheapest_run_at(columns.block_bounds(), costs, need, once, lower)
    finally:
        eviction.scoring = False
    return window, run


def gathered_window(
    fit: ContiguousFit, heuristic: Any, need: int, costs_of: Callable[..., WindowCosts]
) -> tuple[WindowCosts, tuple[float, int, int] | None]:
    """``cheapest_window`` on an arena of few blocks: each block's cost asked in Python, as
    the readable decision does, then the slide by arrays."""
    eviction = fit.allocator.eviction
    blocks = list(fit.arena.blocks())
    window = costs_of(blocks, heuristic, eviction.context)
    bounds = np.array([*(block.start for block in blocks), fit.arena.size], np.float64)
    eviction.scoring = True
    try:
        upper = np.array(window.upper_costs(), np.float64)
        lower, once = None, None
        if getattr(heuristic, "once", False):
            own = [0.0 if window.value(i) is None else window.own(i)[0] for i in range(len(blocks))]
            lower, once = np.array(own), window.run_cost
        run = cheapest_run_at(bounds, upper, need, once, lower)
    finally:
        eviction.scoring = False
    return window, run

"""The window heuristic's decision: which run of adjacent blocks to evict.

Under ``fit="contiguous"`` a request fails when no free block holds it
(``placement.py``). The paper's heuristics then evict the lowest-scoring value,
wherever it lies, and try again: a victim in the middle of used blocks frees a
block too small, and the next victim may lie far from it. The ``window`` heuristic
(``heuristics.WindowHeuristic``, after Coop, NeurIPS 2023) instead looks at the
arena in address order and evicts, all at once, the values of the run of adjacent
blocks (free ones included) that holds the request at the lowest total cost: a
value's cost is ``WindowHeuristic.window_cost``, a block that cannot be freed
(constant, pinned, locked, or reserved for the op running) is a wall no window
crosses. ``Arena.cheapest_window`` does the slide, in one pass. The accelerated
runtime makes the same decision from arrays: the blocks in address order with their
values' table rows, kept as the arena changes (``fast/addresses.py``), and the same
slide by array operations (``fast/windows.py``).

It reads the same ``ScoreContext`` as a score, so the live runtime and the
simulator, with or without the accelerator, choose the same window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .arena import Block, shortest_runs_cheapest
from .estar import evicted_ancestors, evicted_descendants
from .fast.addresses import cheapest_window
from .heuristics import MIN_STALENESS, ScoreContext
from .storage import Storage
from .victims import Choice

if TYPE_CHECKING:
    from .placement import ContiguousFit


def window_victims(fit: ContiguousFit, heuristic: Any, nbytes: int) -> list[tuple[Storage, Choice]]:
    """The values of the cheapest window that would hold ``nbytes``, in address order,
    each with the ``Choice`` its eviction event records (the window's cost as its score;
    the first carries the count of values costed). Empty when no window holds it."""
    eviction = fit.allocator.eviction
    started = time.perf_counter()
    eviction.track(heuristic.cost)
    need = fit.arena.aligned(nbytes)
    with fit.unchanged():
        if fit.allocator.fast is not None:  # the same decision from arrays the arena keeps
            window, run = cheapest_window(fit, heuristic, need, WindowCosts)
        else:  # the reference policy: the readable slide
            window = WindowCosts(list(fit.arena.blocks()), heuristic, eviction.context)
            once = window.run_cost if getattr(heuristic, "once", False) else None
            eviction.scoring = True
            try:
                run = shortest_runs_cheapest(window.sizes(), window.upper_costs(), need, once)
            finally:
                eviction.scoring = False
        if run is not None:  # read while the blocks are still those the run indexes
            total, first, end = run
            chosen = [block.owner() for block in window.blocks[first:end] if not block.free]
    stats = fit.allocator.stats
    stats.searches += 1
    stats.scored += window.costed
    stats.search_time += time.perf_counter() - started
    if run is None:
        return []
    return [
        (storage, Choice(storage, total, None, None, window.costed if i == 0 else 0))
        for i, storage in enumerate(chosen)
    ]


class WindowCosts:
    """What evicting the blocks of a window would cost, for one decision. Each used
    block's value (None: a wall, ``math.inf``) costs ``heuristic.window_cost``, (c +
    c(e*)) / s, when the costs of a window add up (``upper_costs``). With the
    neighbourhood counted once (``run_cost``, the window heuristic's own rule), a window
    costs the sum of its values' c / s (its lower bound) and, once for each evicted
    storage in the e* of any of them, its cost over the staleness of the most recently
    used value whose e* holds it: what h_DTR charges for it when that value is alone.
    That is never more than the sum of ``upper_costs`` (a shared storage counted once
    instead of once per value) and never less than the sum of the values' c / s (the
    accelerated slide reads both bounds: ``fast/windows.py``). ``blocks`` is any sequence
    of the arena's blocks in address order; a block's value is looked up when asked."""

    def __init__(self, blocks: Sequence[Block], heuristic: Any, context: ScoreContext):
        self.blocks, self.heuristic, self.context = blocks, heuristic, context
        self.values: dict[int, Storage | None] = {}  # block index -> its value, once asked
        self.costed = 0  # how many values may be evicted (``upper_costs``)
        self.owns: dict[int, tuple[float, float]] = {}
        self.hoods: dict[int, list[Storage]] = {}

    def sizes(self) -> list[int]:
        return [block.size for block in self.blocks]

    def value(self, i: int) -> Storage | None:
        """The value in block ``i`` that may be evicted (None: free, or a wall)."""
        if i not in self.values:
            self.values[i] = value_of(self.blocks[i])
        return self.values[i]

    def upper_costs(self) -> list[float]:
        """Every block's cost, in address order (and ``costed``: the values among them)."""
        cost, costs = self.heuristic.window_cost, []
        self.costed = 0
        for i, block in enumerate(self.blocks):
            value = None if block.free else self.value(i)
            if value is None:
                costs.append(0.0 if block.free else math.inf)
            else:
                costs.append(cost(value, self.context))
                self.costed += 1
        return costs

    def own(self, i: int) -> tuple[float, float]:
        """Block ``i``'s value's c / s and its staleness s."""
        if i not in self.owns:
            storage = self.value(i)
            assert storage is not None
            stale = max(self.context.clock - storage.last_access, MIN_STALENESS)
            self.owns[i] = (storage.cost / stale, stale)
        return self.owns[i]

    def hood(self, i: int) -> list[Storage]:
        """Block ``i``'s value's e*, walked once; not walked when c(e*) is 0 (the term the
        heuristic keeps up to date), since storages that cost nothing add nothing."""
        if i not in self.hoods:
            storage = self.value(i)
            assert storage is not None
            if self.context.estar(storage) == 0.0:
                self.hoods[i] = []
            else:
                self.hoods[i] = evicted_ancestors(storage) + evicted_descendants(storage)
        return self.hoods[i]

    def run_cost(self, first: int, end: int) -> float:
        """The cost of evicting blocks ``[first, end)``, each neighbour counted once."""
        own: list[float] = []
        rate: dict[int, float] = {}  # e* storage id -> its cost over the least staleness
        for i in range(first, end):
            if self.blocks[i].free:
                continue  # a free block (a run holds no wall)
            cost, stale = self.own(i)
            own.append(cost)
            for storage in self.hood(i):
                charge = storage.cost / stale
                if rate.get(storage.id, -1.0) < charge:
                    rate[storage.id] = charge
        return math.fsum([*own, *rate.values()])


def value_of(block: Block) -> Storage | None:
    """The value in a used block that may be evicted now (None: free, or a wall)."""
    storage = None if block.free or block.owner is None else block.owner()
    return storage if storage is not None and evictable(storage) else None


def evictable(storage: Storage) -> bool:
    """Whether a resident storage may be evicted now (what ``Eviction.evict`` accepts)."""
    return (
        storage.buffer is not None
        and storage.op is not None
        and not storage.pinned
        and not storage.locks
    )

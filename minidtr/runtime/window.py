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
crosses. ``Arena.cheapest_window`` does the slide, in one pass (``fast/windows.py``
the same slide by array operations, which the accelerated runtime uses).

It reads the same ``ScoreContext`` as a score, so the live runtime and the
simulator, with or without the accelerator, choose the same window.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .arena import Block, shortest_runs_cheapest
from .estar import evicted_ancestors, evicted_descendants
from .fast.windows import cheapest_run
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
    window = WindowCosts(list(fit.arena.blocks()), heuristic, eviction.context)
    need = fit.arena.aligned(nbytes)
    once = window.run_cost if getattr(heuristic, "once", False) else None
    eviction.scoring = True
    try:
        costs = window.upper_costs()
        if fit.allocator.fast is None:  # the reference policy: the readable slide
            run = shortest_runs_cheapest(window.sizes(), costs, need, once)
        else:
            sizes = np.array(window.sizes(), np.int64)
            lower = np.array(window.lower_costs(), np.float64) if once else None
            run = cheapest_run(sizes, np.array(costs, np.float64), need, once, lower)
    finally:
        eviction.scoring = False
    stats = fit.allocator.stats
    stats.searches += 1
    stats.scored += window.costed
    stats.search_time += time.perf_counter() - started
    if run is None:
        return []
    total, first, end = run
    storages = [block.owner() for block in window.blocks[first:end] if not block.free]
    return [
        (storage, Choice(storage, total, None, None, window.costed if i == 0 else 0))
        for i, storage in enumerate(storages)
    ]


class WindowCosts:
    """What evicting the blocks of a window would cost, for one decision. Each used
    block's value (None: a wall, ``math.inf``) costs ``heuristic.window_cost``, (c +
    c(e*)) / s, when the costs of a window add up (``upper_costs``). With the
    neighbourhood counted once (``run_cost``, the window heuristic's own rule), a window
    costs the sum of its values' c / s (``lower_costs``) and, once for each evicted
    storage in the e* of any of them, its cost over the staleness of the most recently
    used value whose e* holds it: what h_DTR charges for it when that value is alone.
    That is never more than the sum of ``upper_costs`` (a shared storage counted once
    instead of once per value) and never less than the sum of ``lower_costs``."""

    def __init__(self, blocks: list[Block], heuristic: Any, context: ScoreContext):
        self.blocks, self.heuristic, self.context = blocks, heuristic, context
        self.values: list[Storage | None] = [value_of(block) for block in blocks]
        self.costed = sum(value is not None for value in self.values)
        self.owns: dict[int, tuple[float, float]] = {}
        self.hoods: dict[int, list[Storage]] = {}

    def sizes(self) -> list[int]:
        return [block.size for block in self.blocks]

    def upper_costs(self) -> list[float]:
        cost = self.heuristic.window_cost
        return [
            0.0 if b.free else math.inf if v is None else cost(v, self.context)
            for b, v in zip(self.blocks, self.values, strict=True)
        ]

    def lower_costs(self) -> list[float]:
        return [0.0 if v is None else self.own(i)[0] for i, v in enumerate(self.values)]

    def own(self, i: int) -> tuple[float, float]:
        """Block ``i``'s value's c / s and its staleness s."""
        if i not in self.owns:
            storage = self.values[i]
            assert storage is not None
            stale = max(self.context.clock - storage.last_access, MIN_STALENESS)
            self.owns[i] = (storage.cost / stale, stale)
        return self.owns[i]

    def hood(self, i: int) -> list[Storage]:
        """Block ``i``'s value's e*, walked once; not walked when c(e*) is 0 (the term the
        heuristic keeps up to date), since storages that cost nothing add nothing."""
        if i not in self.hoods:
            storage = self.values[i]
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
            if self.values[i] is None:
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

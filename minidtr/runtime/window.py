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
from .fast.windows import cheapest_run
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
    context = eviction.context
    costed = 0

    def cost(block: Block) -> float:
        nonlocal costed
        storage = block.owner() if block.owner is not None else None
        if storage is None or not evictable(storage):
            return math.inf
        costed += 1
        return heuristic.window_cost(storage, context)

    eviction.scoring = True
    try:
        blocks = list(fit.arena.blocks())
        costs = [0.0 if block.free else cost(block) for block in blocks]
    finally:
        eviction.scoring = False
    need = fit.arena.aligned(nbytes)
    if fit.allocator.fast is None:  # the reference policy: the readable slide
        run = shortest_runs_cheapest([block.size for block in blocks], costs, need)
    else:
        sizes = np.fromiter((block.size for block in blocks), np.int64, len(blocks))
        run = cheapest_run(sizes, np.array(costs, np.float64), need)
    found = None if run is None else (run[0], blocks[run[1] : run[2]])
    stats = fit.allocator.stats
    stats.searches += 1
    stats.scored += costed
    stats.search_time += time.perf_counter() - started
    if found is None:
        return []
    total, blocks = found
    storages = [block.owner() for block in blocks if not block.free]
    return [
        (storage, Choice(storage, total, None, None, costed if i == 0 else 0))
        for i, storage in enumerate(storages)
    ]


def evictable(storage: Storage) -> bool:
    """Whether a resident storage may be evicted now (what ``Eviction.evict`` accepts)."""
    return (
        storage.buffer is not None
        and storage.op is not None
        and not storage.pinned
        and not storage.locks
    )

"""Accelerates ``Arena.cheapest_window``'s slide: the same window, by array operations.

The readable slide (``arena.py``) walks the blocks with two ends, one Python step per
block. Here, over the blocks in address order with their sizes and costs:

- ``S``, the prefix sums of the sizes (``S[i]`` = the bytes below block ``i``), so that
  the run ``[i, j)`` holds ``S[j] - S[i]`` bytes;
- each start's shortest run that holds the request: ``searchsorted(S, S[i] + need)``
  (costs are never negative, so for a start its shortest run is its cheapest);
- *walls* (blocks that cannot be freed, cost ``inf``) as segment breaks: a start's run
  is kept only if it ends at or before the first wall from that start on;
- each kept run's cost from the prefix sums of the costs, ``P[j] - P[i]``.

Prefix differences round differently from the readable slide's sums, so the cheapest
run is not taken from them directly: every run whose approximate cost is within the
sums' rounding error of the lowest gets its exact cost (``math.fsum`` of its costs, as
the readable slide computes each), and the lowest exact cost wins, the lowest address
among equals. Both slides thus choose the same window (tests/test_window.py checks it
on random arenas). The exact costs are few: near-ties only.
"""

from __future__ import annotations

import math

import numpy as np


def cheapest_run(sizes: np.ndarray, costs: np.ndarray, need: int) -> tuple[float, int, int] | None:
    """The cheapest run ``[first, end)`` of blocks whose ``sizes`` sum to at least ``need``
    with no ``inf`` among its ``costs``, as ``(exact cost, first, end)``; None when no run
    holds it. ``sizes`` and ``costs`` are in address order, costs >= 0."""
    n = len(sizes)
    if n == 0:
        return None
    walls = np.isinf(costs)
    finite = np.where(walls, 0.0, costs)
    size_sums = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=size_sums[1:])
    cost_sums = np.zeros(n + 1, np.float64)
    np.cumsum(finite, out=cost_sums[1:])
    # the first wall at or after each block (n: none); a run [i, j) must have j <= it
    index = np.arange(n)
    next_wall = np.minimum.accumulate(np.where(walls, index, n)[::-1])[::-1]
    starts = np.flatnonzero(~walls)
    ends = np.searchsorted(size_sums, size_sums[starts] + need, side="left")
    kept = ends <= next_wall[starts]
    starts, ends = starts[kept], ends[kept]
    if not len(starts):
        return None
    approximate = cost_sums[ends] - cost_sums[starts]
    lowest = approximate.min()
    # each prefix sum is off by at most about n ulps of the largest: 2n bounds a difference
    slack = 2 * (n + 1) * np.spacing(cost_sums[-1])
    near = np.flatnonzero(approximate <= lowest + slack)
    best: tuple[float, int, int] | None = None
    for k in near.tolist():  # few: the runs tied with the lowest, within rounding
        first, end = int(starts[k]), int(ends[k])
        exact = math.fsum(costs[first:end].tolist())
        if best is None or exact < best[0]:
            best = (exact, first, end)
    return best

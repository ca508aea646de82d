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

When a run's cost is not a sum (``run_cost``: the window heuristic counting a shared
neighbourhood once), the same runs are found the same way and two sums bound each
run's cost: ``costs`` (each value with its whole neighbourhood, never less) and
``lower`` (each value without it, never more). Only the runs whose lower bound is
within reach of the lowest upper bound get their exact cost, in the order of their
lower bounds, until the next lower bound passes the best exact cost found.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def cheapest_run(
    sizes: np.ndarray,
    costs: np.ndarray,
    need: int,
    run_cost: Callable[[int, int], float] | None = None,
    lower: np.ndarray | None = None,
) -> tuple[float, int, int] | None:
    """The cheapest run ``[first, end)`` of blocks whose ``sizes`` sum to at least ``need``
    with no ``inf`` among its ``costs``, as ``(exact cost, first, end)``; None when no run
    holds it. ``sizes`` and ``costs`` are in address order, costs >= 0. With ``run_cost``
    (and ``lower``), a run costs ``run_cost(first, end)``, between the sums of ``lower``
    and of ``costs`` over it (the module docstring)."""
    runs = shortest_runs(sizes, costs, need)
    if runs is None:
        return None
    starts, ends, cost_sums = runs
    upper = cost_sums[ends] - cost_sums[starts]
    n = len(sizes)
    if run_cost is None or lower is None:
        slack = 2 * (n + 1) * np.spacing(cost_sums[-1])
        near = np.flatnonzero(upper <= upper.min() + slack)
        exact = [math.fsum(costs[starts[k] : ends[k]].tolist()) for k in near.tolist()]
        return lowest_run(exact, starts[near], ends[near])
    lower_sums = np.zeros(n + 1, np.float64)
    np.cumsum(lower, out=lower_sums[1:])
    floor = lower_sums[ends] - lower_sums[starts]
    slack = 4 * (n + 1) * np.spacing(max(cost_sums[-1], lower_sums[-1]))
    order = np.argsort(floor, kind="stable")
    order = order[floor[order] <= upper.min() + slack]  # the others cost more than one run
    best: tuple[float, int, int] | None = None
    for k in order.tolist():
        if best is not None and floor[k] > best[0] + slack:
            break  # this run and the rest cost more than the best found
        first, end = int(starts[k]), int(ends[k])
        total = run_cost(first, end)
        if best is None or (total, first) < (best[0], best[1]):
            best = (total, first, end)
    return best


def shortest_runs(
    sizes: np.ndarray, costs: np.ndarray, need: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each start's shortest run holding ``need`` with no wall in it (``starts``, ``ends``,
    ascending starts) and the prefix sums of the costs, walls counted 0; None when none."""
    n = len(sizes)
    if n == 0:
        return None
    walls = np.isinf(costs)
    size_sums = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=size_sums[1:])
    cost_sums = np.zeros(n + 1, np.float64)
    np.cumsum(np.where(walls, 0.0, costs), out=cost_sums[1:])
    # the first wall at or after each block (n: none); a run [i, j) must have j <= it
    next_wall = np.minimum.accumulate(np.where(walls, np.arange(n), n)[::-1])[::-1]
    starts = np.flatnonzero(~walls)
    ends = np.searchsorted(size_sums, size_sums[starts] + need, side="left")
    kept = ends <= next_wall[starts]
    if not kept.any():
        return None
    return starts[kept], ends[kept], cost_sums


def lowest_run(
    totals: list[float], starts: np.ndarray, ends: np.ndarray
) -> tuple[float, int, int] | None:
    """The lowest of ``totals``, the first (lowest start) among equals."""
    best: tuple[float, int, int] | None = None
    for total, first, end in zip(totals, starts.tolist(), ends.tolist(), strict=True):
        if best is None or total < best[0]:
            best = (total, first, end)
    return best
